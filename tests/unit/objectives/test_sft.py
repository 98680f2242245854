"""rewardloop.objectives.sft: SFT is the plain ε-MSE of the chosen image of each pair (DiffusionDPO's
``--train_method sft``), recomputed here from the DDPM formula on the objective's own micro-batch; the
rejected image never enters it; on a v-prediction model its target is the velocity."""

from __future__ import annotations

import pytest
import torch

from meta_device import policy_on
from objective_checks import alphas_cumprod, config, pair_inputs, prompt_embeds, sd15_model_info, style_latents, \
    tiny_unet, trained
from rewardloop.objectives import get_objective
from rewardloop.objectives.registry import ModelInfo
from rewardloop.objectives.sft import SFT

SHAPE = (4, 8, 8)


def test_sft_is_registered_and_trains_on_pairs():
    assert get_objective("sft") is SFT and SFT.signal == "pairs"


def test_the_loss_is_the_eps_mse_of_the_chosen_images_only(tmp_path):
    chosen, rejected = style_latents(0, 8, SHAPE, seed=1), style_latents(1, 8, SHAPE, seed=2)
    embeds = prompt_embeds(8, 64, seed=3)
    cfg = config("config.yaml", loss="sft", steps=2, batch_size=4, learning_rate=1e-3)
    objective, trainer, data, history = trained(cfg, tiny_unet(), pair_inputs(chosen, rejected, embeds),
                                                sd15_model_info(), tmp_path)
    assert len(history) == 2
    batch = objective.micro_batch(data, 5, 0)
    a = alphas_cumprod()[batch.timesteps].view(-1, 1, 1, 1)
    rows = batch.index
    noisy = (a.sqrt() * chosen[rows].double() + (1 - a).sqrt() * batch.noise.double()).float()
    with torch.no_grad():
        eps = trainer.model(noisy, batch.timesteps, encoder_hidden_states=embeds[rows]).sample
        expected = ((eps.double() - batch.noise.double()) ** 2).mean()
        got, logs = objective.loss(trainer.policy, data, (5, 0))
        # the same micro-batch with other rejected images: the same loss
        swapped_data = objective.load(pair_inputs(chosen, torch.randn_like(rejected), embeds), sd15_model_info())
        swapped, _ = objective.loss(trainer.policy, swapped_data, (5, 0))
    assert float(got) == pytest.approx(float(expected), rel=1e-4)
    assert logs == {"train/loss": pytest.approx(float(got))}
    assert float(swapped) == float(got)


# --- on a v-prediction model --------------------------------------------------------------------------------

def test_sft_on_a_v_prediction_model_regresses_the_velocity():
    """Target v = sqrt(a_t) eps - sqrt(1 - a_t) x0 (Salimans & Ho 2022), not eps."""
    inputs = pair_inputs(style_latents(0, 8, (4, 8, 8), 1), style_latents(1, 8, (4, 8, 8), 2), prompt_embeds(8, 64, 3))
    cfg = config("config.yaml", loss="sft", batch_size=4)
    objective = get_objective("sft").from_config(cfg, 0)
    info = sd15_model_info()
    info = ModelInfo(info.family, {**info.scheduler_config, "prediction_type": "v_prediction"}, info.vae_scale_factor)
    data = objective.load(inputs, info)
    unet = tiny_unet()
    batch = objective.micro_batch(data, 0, 0)
    assert not batch.flip_mask.any() and not batch.empty_mask.any()
    x0 = torch.stack([inputs.tensors[f"latents/{s}"] for s in inputs.signal.chosen.iloc[batch.index.numpy()]])
    embeds = torch.stack([inputs.tensors[f"prompt_embeds/{p}"] for p in inputs.signal.prompt_id.iloc[batch.index.numpy()]])
    a = alphas_cumprod()[batch.timesteps].view(-1, 1, 1, 1)
    noisy = (a.sqrt() * x0 + (1 - a).sqrt() * batch.noise).float()
    with torch.no_grad():
        prediction = unet(noisy, batch.timesteps, encoder_hidden_states=embeds).sample.double()
        got, _ = objective.loss(policy_on("cpu", unet), data, (0, 0))
    velocity = a.sqrt() * batch.noise - (1 - a).sqrt() * x0
    assert got.item() == pytest.approx(((prediction - velocity) ** 2).mean().item(), rel=1e-4)
    assert got.item() != pytest.approx(((prediction - batch.noise) ** 2).mean().item(), rel=1e-2)

"""Diffusion-DPO and SFT on the sd3 family (train.loss dpo/sft, model.family sd3): the flow-matching denoising
loss of flow_grpo's scripts/train_sd3_dpo.py, recomputed here from its formulas, and the direction on
held-out images. Seconds each, on the tiny random-init SD3 transformer of objective_checks.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from objective_checks import (config, flow_velocity, pair_inputs, prompt_embeds, style_latents, tiny_transformer,
                              trained)
from objective_inputs import BAD, GOOD, SD3_LATENT, FlowStep, held_out_flow_matching_shift
from rewardloop.config import ConfigError


def sd3_pair_inputs(chosen, rejected, seed: int):
    """pair_inputs with the pooled embeddings an SD3 transformer also reads."""
    inputs = pair_inputs(chosen, rejected, prompt_embeds(len(chosen), 64, seed=seed))
    gen = torch.Generator().manual_seed(seed + 1)
    for i in range(len(chosen)):
        inputs.tensors[f"pooled_embeds/p{i}"] = torch.randn(64, generator=gen)
    return inputs


def sd3_config(loss: str, **train):
    return config("configs/tiny_sd3_grpo.yaml", loss=loss, batch_size=4, learning_rate=3e-3,
                  gradient_accumulation_steps=1, **train)


def shifted_sigma(index: int, shift: float = 3.0, steps: int = 1000) -> float:
    """The training grid of diffusers' FlowMatchEulerDiscreteScheduler (SD3.5: shift 3): sigma = (steps - i) / steps,
    shifted to shift s / (1 + (shift - 1) s)."""
    s = (steps - index) / steps
    return shift * s / (1 + (shift - 1) * s)


def test_sd3_dpo_loss_equals_flow_grpos_on_a_micro_batch(tmp_path):
    chosen = style_latents(GOOD, 8, SD3_LATENT, seed=1)
    rejected = style_latents(BAD, 8, SD3_LATENT, seed=2)
    inputs = sd3_pair_inputs(chosen, rejected, seed=3)
    objective, trainer, data, _ = trained(sd3_config("dpo", steps=3, dpo={"beta": 500.0}), tiny_transformer(),
                                          inputs, FlowStep().model_info(), tmp_path)
    batch = objective.micro_batch(data, 1, 0)
    # indices int(u * 1000), u ~ logit-normal(0, 1) (flow_grpo: compute_density_for_timestep_sampling)
    assert batch.timesteps.dtype == torch.long and (batch.timesteps < 1000).all()
    sigma = torch.tensor([shifted_sigma(int(i)) for i in batch.timesteps], dtype=torch.float64).view(-1, 1, 1, 1)
    t = inputs.tensors
    rows = inputs.signal.iloc[batch.index.numpy()]
    w = torch.stack([t[f"latents/{c}"] for c in rows.chosen]).double()
    l_ = torch.stack([t[f"latents/{r}"] for r in rows.rejected]).double()
    embeds = torch.stack([t[f"prompt_embeds/{p}"] for p in rows.prompt_id])
    pooled = torch.stack([t[f"pooled_embeds/{p}"] for p in rows.prompt_id])
    noise = batch.noise.double()
    model = trainer.model

    def errors(x0):
        x_t = ((1 - sigma) * x0 + sigma * noise).float()
        v = flow_velocity(model, x_t, sigma.flatten().float(), embeds, pooled)
        return ((v - (noise - x0)) ** 2).mean(dim=(1, 2, 3))

    with torch.no_grad():
        policy_w, policy_l = errors(w), errors(l_)
        model.disable_adapters()
        ref_w, ref_l = errors(w), errors(l_)
        model.enable_adapters()
        got, logs = objective.loss(trainer.policy, data, (1, 0))
    inside = -0.5 * 500.0 * ((policy_w - policy_l) - (ref_w - ref_l))
    expected = -F.logsigmoid(inside).mean()
    assert (policy_w - ref_w).abs().max() > 1e-6  # the LoRA moved
    assert got.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    assert logs["train/implicit_acc"] == pytest.approx(float((inside > 0).double().mean()))


@pytest.mark.parametrize("direction", [1, -1])
@pytest.mark.parametrize("loss, options", [("dpo", {"dpo": {"beta": 500.0}}), ("sft", {})])
def test_sd3_pair_objectives_move_towards_the_chosen_images(tmp_path, loss, options, direction):
    train_good, train_bad = style_latents(GOOD, 24, SD3_LATENT, seed=1), style_latents(BAD, 24, SD3_LATENT, seed=2)
    chosen, rejected = (train_good, train_bad) if direction == 1 else (train_bad, train_good)
    _, trainer, _, _ = trained(sd3_config(loss, steps=30, **options), tiny_transformer(),
                               sd3_pair_inputs(chosen, rejected, seed=3), FlowStep().model_info(), tmp_path)
    moved = held_out_flow_matching_shift(trainer.model)
    assert moved * direction < 0, moved


def test_offline_pairs_are_refused_on_sd3(tmp_path):
    offline = tmp_path / "pairs.parquet"
    offline.write_bytes(b"PAR1")
    with pytest.raises(ConfigError, match=r"^data\.offline_pairs: offline pairs are encoded for the UNet families \(sd15, sdxl\) only"):
        config("configs/tiny_sd3_grpo.yaml", {"data": {"offline_pairs": str(offline)}}, loss="dpo")

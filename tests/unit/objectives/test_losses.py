"""The objectives' losses against independent references: Diffusion-DPO's and the denoising MSE by hand, then
each objective's ``loss`` on a micro-batch recomputed from the stage's raw tensors with direct calls of the
tiny random-init denoisers and the papers' formulas (objective_checks.py), never with the project's helpers;
and the pair losses on the policy's device.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from meta_device import META, meta_items, policy_on  # noqa: F401  (meta_items: a fixture)
from objective_checks import (alphas_cumprod, clean_latent_micro_batch, config, pair_inputs, prompt_embeds,
                              reference_nft_loss, sd15_model_info, style_latents, three_velocities, tiny_transformer,
                              tiny_unet, trained)
from objective_inputs import CPSStep, DDIMStep, FlowStep, rollout_inputs
from rewardloop.objectives import get_objective
from rewardloop.objectives.dpo import dpo_loss
from rewardloop.objectives.preference import HELD_STREAM, denoising_mse


def test_dpo_loss_matches_hand_computation():
    pw, pl = torch.tensor([0.10, 0.30]), torch.tensor([0.20, 0.10])
    rw, rl = torch.tensor([0.15, 0.20]), torch.tensor([0.15, 0.20])
    beta = 10.0
    # inside_i = -0.5 * beta * ((pw - pl) - (rw - rl))
    inside = [-0.5 * 10 * ((0.10 - 0.20) - 0.0), -0.5 * 10 * ((0.30 - 0.10) - 0.0)]  # [0.5, -1.0]
    expected = sum(-math.log(1 / (1 + math.exp(-x))) for x in inside) / 2
    loss, acc = dpo_loss(pw, pl, rw, rl, beta)
    assert math.isclose(loss.item(), expected, rel_tol=1e-6)
    assert acc.item() == 0.5


def test_dpo_loss_is_log2_when_policy_equals_reference():
    losses = torch.tensor([0.3, 0.7, 0.2])
    loss, acc = dpo_loss(losses, losses.flip(0), losses, losses.flip(0), beta=5000)
    assert math.isclose(loss.item(), math.log(2), rel_tol=1e-6)
    assert acc.item() == 0.0


def test_dpo_gradient_lowers_chosen_loss_relative_to_rejected():
    pw = torch.tensor([0.5], requires_grad=True)
    pl = torch.tensor([0.5], requires_grad=True)
    loss, _ = dpo_loss(pw, pl, torch.tensor([0.5]), torch.tensor([0.5]), beta=1.0)
    loss.backward()
    assert pw.grad.item() > 0 > pl.grad.item()


def test_denoising_mse_is_per_sample():
    pred = torch.zeros(2, 1, 2, 2)
    target = torch.stack([torch.ones(1, 2, 2), 2 * torch.ones(1, 2, 2)])
    assert denoising_mse(pred, target).tolist() == [1.0, 4.0]


# --- each objective's loss on a micro-batch, recomputed from the stage's raw tensors ------------------------

@pytest.mark.parametrize("augment", [{}, {"hflip": True, "proportion_empty_prompts": 0.5}], ids=["plain", "hflip-empty"])
@pytest.mark.parametrize("loss", ["dpo", "sft"])
def test_pair_losses_equal_the_papers_on_a_micro_batch(tmp_path, loss, augment):
    """Diffusion-DPO (Wallace et al. eq. 14 as DiffusionDPO's train.py) and SFT on a trained LoRA:
    chosen and rejected share noise, timestep, prompt (or the empty one) and flip."""
    inputs = pair_inputs(style_latents(0, 12, (4, 8, 8), 1), style_latents(1, 12, (4, 8, 8), 2),
                         prompt_embeds(12, 64, seed=3))
    empty = prompt_embeds(1, 64, seed=4)[0]
    inputs.tensors["empty_prompt/prompt_embeds"] = empty
    cfg = config("config.yaml", loss=loss, steps=3, batch_size=6, learning_rate=5e-3,
                 dpo={"beta": 500, "reference": "base"}, **augment)
    objective, trainer, data, _ = trained(cfg, tiny_unet(), inputs, sd15_model_info(), tmp_path)
    step, micro = 7, 1
    batch = objective.micro_batch(data, step, micro)
    if augment:
        assert batch.flip_mask.any() and batch.empty_mask.any() and not batch.empty_mask.all()
    rows = inputs.signal.iloc[batch.index.numpy()]

    def latents(ids):
        stacked = torch.stack([inputs.tensors[f"latents/{s}"] for s in ids])
        return torch.where(batch.flip_mask.view(-1, 1, 1, 1), stacked.flip(-1), stacked)

    cond = torch.stack([inputs.tensors[f"prompt_embeds/{p}"] for p in rows.prompt_id])
    cond = torch.where(batch.empty_mask.view(-1, 1, 1), empty, cond)
    a = alphas_cumprod()[batch.timesteps].view(-1, 1, 1, 1)
    model = trainer.model

    def errors(x0):
        noisy = (a.sqrt() * x0 + (1 - a).sqrt() * batch.noise).float()
        prediction = model(noisy, batch.timesteps, encoder_hidden_states=cond).sample
        return ((prediction - batch.noise) ** 2).mean(dim=(1, 2, 3)).double()

    with torch.no_grad():
        policy_w, policy_l = errors(latents(rows.chosen)), errors(latents(rows.rejected))
        model.disable_adapters()
        ref_w, ref_l = errors(latents(rows.chosen)), errors(latents(rows.rejected))
        model.enable_adapters()
        got, logs = objective.loss(trainer.policy, data, (step, micro))
    if loss == "dpo":
        inside = -0.5 * 500 * ((policy_w - policy_l) - (ref_w - ref_l))
        expected = -F.logsigmoid(inside).mean()
        assert logs["train/implicit_acc"] == pytest.approx(float((inside > 0).double().mean()))
        assert abs(expected.item() - math.log(2)) > 1e-3  # the trained LoRA is not the reference
    else:
        expected = policy_w.mean()
    assert got.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    assert logs["train/loss"] == pytest.approx(got.item())
    # evaluate() draws its batches from a stream apart from training's
    held = objective.loss(trainer.policy, data, (step, micro), stream=HELD_STREAM)[0]
    assert abs(held.item() - got.item()) > 1e-6


@pytest.mark.parametrize("step", [FlowStep(), CPSStep(), DDIMStep()], ids=["sd3-flow-sde", "sd3-cps", "sd15-ddim"])
def test_grpo_loss_equals_the_papers_on_a_micro_batch(tmp_path, step):
    """Flow-GRPO's clipped surrogate and KL (flow_grpo train_sd3.py) on recorded steps re-scored with CFG."""
    leans = [1, -1] * 4
    inputs = rollout_inputs(step, step.denoiser(), leans, [1.5, -0.5, 0.2, -1.0, 2.0, -2.0, 0.7, -0.9], seed=10)
    inputs.tensors["rollout/guidance_scale"] = torch.tensor(2.0)
    clip = 0.005
    cfg = step.config(clip_range=clip, kl_beta=0.5)
    objective, trainer, data, _ = trained(cfg, step.denoiser(), inputs, step.model_info(), tmp_path)
    index = torch.tensor([5, 0, 3, 6])
    rows = inputs.signal.iloc[index.numpy()]
    t = inputs.tensors

    def recorded(name):
        return torch.stack([t[f"trajectory/{s}/{name}"][0] for s in rows.sample_id])

    x, next_x, old = recorded("latents"), recorded("next_latents"), recorded("log_probs").double()
    embeds = torch.stack([t[f"prompt_embeds/{p}"] for p in rows.prompt_id])
    pooled = step.pooled(t, rows.prompt_id)
    uncond = (t["empty_prompt/prompt_embeds"][None],
              t["empty_prompt/pooled_embeds"][None] if step.family == "sd3" else None)
    model = trainer.model
    mean = step.mean(model, x, embeds, pooled, uncond, 2.0)
    model.disable_adapters()
    mean_ref = step.mean(model, x, embeds, pooled, uncond, 2.0)
    model.enable_adapters()
    advantages = torch.tensor(rows.advantage.to_numpy())
    log_prob = step.log_likelihood(next_x, mean, step.scale)
    ratio = torch.exp(log_prob - old)
    policy_loss = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip)).mean()
    kl = (((mean - mean_ref) ** 2).mean(dim=(1, 2, 3)) / (2 * step.std**2)).mean()
    with torch.no_grad():
        got, logs = objective.loss(trainer.policy, data, (index, 0))
    assert kl.item() > 0 and ((ratio - 1).abs() > clip).any()  # the LoRA moved: both terms are exercised
    assert logs["train/policy_loss"] == pytest.approx(policy_loss.item(), abs=1e-5)
    assert logs["train/kl_loss"] == pytest.approx(kl.item(), rel=1e-3)
    assert got.item() == pytest.approx((policy_loss + 0.5 * kl).item(), abs=1e-5)
    assert logs["train/clipfrac"] == pytest.approx(float(((ratio - 1).abs() > clip).double().mean()))
    assert logs["train/approx_kl"] == pytest.approx(float(0.5 * ((log_prob - old) ** 2).mean()), rel=1e-3, abs=1e-9)
    assert logs["train/log_prob_mean_abs_diff"] == pytest.approx(float((log_prob - old).abs().mean()), rel=1e-3)
    assert logs["train/ratio_mean"] == pytest.approx(float(ratio.mean()), rel=1e-5)
    objective.options = dataclasses.replace(objective.options, kl_beta=0.0)
    with torch.no_grad():
        got, logs = objective.loss(trainer.policy, data, (index, 0))
    assert logs["train/kl_loss"] == 0 and got.item() == pytest.approx(policy_loss.item(), abs=1e-5)


def test_nft_loss_equals_the_reference_code_on_a_micro_batch(tmp_path):
    """DiffusionNFT's loss (NVlabs train_nft_sd3.py) on a micro-batch of the plan, with an old policy that
    differs from the trained one and the KL to the reference (the LoRA disabled)."""
    from objective_inputs import nft_inputs

    inputs = nft_inputs(1, seed=20)
    inputs.signal["advantage"] = [1.5, -0.5, 0.2, -1.0, 2.0, -2.0, 0.7, -0.9] * 2
    cfg = config("configs/tiny_sd3_grpo.yaml", loss="nft", batch_size=4, learning_rate=3e-3,
                 gradient_accumulation_steps=1, nft={"beta": 0.5, "kl_beta": 300.0})
    objective, trainer, data, _ = trained(cfg, tiny_transformer(), inputs, FlowStep().model_info(), tmp_path)
    policy = trainer.policy
    policy.extra["old"] = [p.detach() * 0.5 for p in policy.trainable]  # an old policy between base and current
    index, grid_index, noise_seed = objective.plan(data, 1)[1][0]
    rows, x0, embeds, pooled = clean_latent_micro_batch(inputs, index)
    t = inputs.tensors
    sigma = t["rollout/sigmas"][grid_index]  # the rollout's grid without its final 0
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(noise_seed))
    x_t = (1 - sigma.view(-1, 1, 1, 1)) * x0 + sigma.view(-1, 1, 1, 1) * noise
    v, v_ref, v_old = three_velocities(policy, x_t, sigma, embeds, pooled, "old")
    with torch.no_grad():
        got, logs = objective.loss(policy, data, (index, grid_index, noise_seed))
    as_numpy = [a.double().numpy() for a in (v, v_old, x_t, x0, sigma)]
    expected = reference_nft_loss(*as_numpy, rows.advantage.to_numpy(), 0.5, 5.0)
    kl = float(((v - v_ref) ** 2).mean())
    assert (v - v_old).abs().max() > 1e-4 and kl > 0
    assert logs["train/policy_loss"] == pytest.approx(expected, rel=1e-4)
    assert logs["train/kl_loss"] == pytest.approx(kl, rel=1e-4)
    assert got.item() - logs["train/policy_loss"] == pytest.approx(300.0 * kl, rel=1e-3)
    assert logs["train/old_deviate"] == pytest.approx(float(((v - v_old) ** 2).mean()), rel=1e-4)
    # The grid is the rollout's sigmas but the final 0: int(4 x 0.99) = 3 distinct points per sample, all 4 used.
    plan = objective.plan(data, 1)
    points = [g for update in plan for _, grid_index, _ in update for g in grid_index.tolist()]
    assert sorted(set(points)) == [0, 1, 2, 3] and len(points) == 16 * 3
    objective.options = dataclasses.replace(objective.options, kl_beta=0.0, timestep_fraction=0.3)
    assert sum(len(update) for update in objective.plan(data, 1)) == 4  # int(4 x 0.3) = 1 point per batch
    with torch.no_grad():
        got, logs = objective.loss(policy, data, (index, grid_index, noise_seed))
    assert logs["train/kl_loss"] == 0 and got.item() == pytest.approx(expected, rel=1e-4)


# --- the pair losses where the policy is --------------------------------------------------------------------

@pytest.mark.parametrize("loss", ["dpo", "sft"])
def test_pair_losses_are_computed_on_the_policy_device_in_fp32(meta_items, loss):  # noqa: F811
    inputs = pair_inputs(style_latents(0, 8, (4, 8, 8), 1), style_latents(1, 8, (4, 8, 8), 2), prompt_embeds(8, 64, 3))
    inputs.tensors["empty_prompt/prompt_embeds"] = prompt_embeds(1, 64, seed=4)[0]
    cfg = config("config.yaml", loss=loss, batch_size=4, hflip=True, proportion_empty_prompts=0.5)
    objective = get_objective(loss).from_config(cfg, 0)
    data = objective.load(inputs, sd15_model_info())
    got, _ = objective.loss(policy_on(META, tiny_unet(), tiny_unet(1)), data, (0, 0))
    assert got.device == META and got.dtype == torch.float32 and got.shape == ()

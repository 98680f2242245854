"""Advantage Weighted Matching (train.loss: awm): its loss against Flow-Factory's formulas written out here
in numpy, its timestep draws, its EMA, and its direction on held-out images. Seconds each, on the
tiny random-init SD3 transformer of objective_checks.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from objective_checks import (clean_latent_micro_batch, config, flow_velocity, three_velocities, tiny_transformer,
                              trained)
from objective_inputs import FlowStep, held_out_flow_matching_shift, nft_inputs
from rewardloop.objectives.awm import ema_decay, matching_log_prob, stratified_grid_indices
from rewardloop.objectives.registry import ObjectiveError


def awm_config(**awm):
    return config("configs/tiny_sd3_grpo.yaml", loss="awm", batch_size=4, learning_rate=3e-3,
                  gradient_accumulation_steps=1, awm=awm)


def reference_weighted_log_prob(v, target, t, weighting, p=0.25):
    """Flow-Factory ``AWMTrainer.compute_weighted_log_prob``, from its formulas (numpy, float64)."""
    error = ((v - target) ** 2).reshape(len(v), -1).mean(axis=1)
    t = np.asarray(t, dtype=np.float64)
    if weighting == "uniform":
        return -error
    if weighting == "t":
        return -error * t
    if weighting == "t**2":
        return -error * t * t
    if weighting == "huber":
        return -(np.sqrt(error + 1e-10) - 1e-5) * t
    return -(np.power(error + 1e-10, p) - np.power(1e-10, p)) * t / p


@pytest.mark.parametrize("weighting", ["uniform", "t", "t**2", "huber", "ghuber"])
def test_each_weighting_is_flow_factorys(weighting):
    gen = torch.Generator().manual_seed(0)
    v, target = torch.randn(3, 4, 2, 2, generator=gen), torch.randn(3, 4, 2, 2, generator=gen)
    t = torch.tensor([0.9, 0.5, 0.2])
    got = matching_log_prob(v, target, t, weighting, 0.25).double().numpy()
    expected = reference_weighted_log_prob(v.double().numpy(), target.double().numpy(), t.double().numpy(), weighting)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert len({round(float(x), 6) for x in got}) == 3


def test_timesteps_are_stratified_over_the_grid_in_range_without_its_first():
    grid = torch.tensor([1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05])
    # timestep_range 0.9: sigmas >= 0.1 (indices 0..10); skip_first: from index 1; 5 strata of [1, 10].
    draws = torch.stack([stratified_grid_indices(grid, 5, 0.9, True, seed) for seed in range(200)])
    bounds = torch.linspace(1, 10, 6).long()
    for k in range(5):
        assert draws[:, k].min() >= bounds[k] and draws[:, k].max() < max(bounds[k + 1], bounds[k] + 1)
    assert draws.min() == 1 and draws.max() == 9 and len(set(draws.flatten().tolist())) == 9
    assert torch.equal(stratified_grid_indices(grid, 5, 0.9, True, 3), stratified_grid_indices(grid, 5, 0.9, True, 3))
    assert stratified_grid_indices(grid, 1, 0.9, False, 0).item() in range(0, 11)
    with pytest.raises(ObjectiveError, match="train.awm.timestep_range"):
        stratified_grid_indices(torch.tensor([0.8, 0.5]), 2, 0.1, False, 0)
    with pytest.raises(ObjectiveError, match="train.awm.skip_first"):
        stratified_grid_indices(torch.tensor([1.0, 0.5]), 1, 0.2, True, 0)


def test_the_ema_schedules_are_flow_factorys():
    assert ema_decay("constant", 0.3, 7, 1000, 0.0) == 0.3
    assert ema_decay("linear", 0.3, 250, 1000, 0.1) == pytest.approx(0.1 + 0.2 * 0.25)
    assert ema_decay("linear", 0.3, 2000, 1000, 0.0) == 0.3
    assert ema_decay("power", 0.9, 3, 10, 0.0) == pytest.approx(4 / 13)
    assert ema_decay("power", 0.2, 30, 10, 0.0) == 0.2


def test_awm_loss_equals_flow_factorys_on_a_micro_batch(tmp_path):
    """The policy loss, the KL to the reference (the LoRA disabled) and to the EMA, on a micro-batch of the plan."""
    inputs = nft_inputs(1, seed=20)
    inputs.signal["advantage"] = [1.5, -0.5, 0.2, -1.0, 2.0, -7.0, 0.7, -0.9] * 2  # -7 is clipped to -5
    cfg = awm_config(weighting="t", kl_beta=300.0, ema_kl_beta=50.0, skip_first=False)
    objective, trainer, data, history = trained(cfg, tiny_transformer(), inputs, FlowStep().model_info(), tmp_path)
    assert all(h["train/clipfrac"] == 0 for h in history)  # the ratio is 1: the update never splits a batch
    policy, model = trainer.policy, trainer.model
    policy.extra["ema"] = [p.detach() * 0.5 for p in policy.trainable]  # an EMA between base and current
    index, grid_index, noise_seed = objective.plan(data, 1)[1][0]
    rows, x0, embeds, pooled = clean_latent_micro_batch(inputs, index)
    t = inputs.tensors
    sigma = float(t["rollout/sigmas"][grid_index])
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(noise_seed))
    x_t = (1 - sigma) * x0 + sigma * noise
    v, v_ref, v_ema = three_velocities(policy, x_t, sigma, embeds, pooled, "ema")
    got, logs = objective.loss(policy, data, (index, grid_index, noise_seed))
    advantages = np.clip(rows.advantage.to_numpy(), -5, 5)
    # ratio = exp(logp - logp_old) = 1 here: the loss is mean(-A ratio), its value -mean(A).
    assert logs["train/policy_loss"] == pytest.approx(float(-advantages.mean()), rel=1e-6)
    kl, ema_kl = float(((v - v_ref) ** 2).mean()), float(((v - v_ema) ** 2).mean())
    assert kl > 0 and ema_kl > 0
    assert logs["train/kl_loss"] == pytest.approx(kl, rel=1e-4)
    assert logs["train/ema_kl_loss"] == pytest.approx(ema_kl, rel=1e-4)
    assert got.item() == pytest.approx(float(-advantages.mean()) + 300.0 * kl + 50.0 * ema_kl, rel=1e-4)
    # Its gradient is that of -mean(A log p), log p = -t mean((v - (eps - x0))^2).
    policy.model.zero_grad()
    objective.options = dataclasses.replace(objective.options, kl_beta=0.0, ema_kl_beta=0.0)
    objective.loss(policy, data, (index, grid_index, noise_seed))[0].backward()
    got_grad = [p.grad.clone() for p in policy.trainable]
    policy.model.zero_grad()
    v_grad = flow_velocity(model, x_t, sigma, embeds, pooled)
    log_p = -sigma * ((v_grad - (noise - x0).double()) ** 2).mean(dim=(1, 2, 3))
    (-(torch.tensor(advantages) * log_p).mean()).backward()
    for mine, theirs in zip(got_grad, policy.trainable):
        torch.testing.assert_close(mine, theirs.grad.to(mine.dtype), rtol=1e-3, atol=1e-7)


def test_the_plan_draws_one_timestep_set_per_batch_from_the_seed(tmp_path):
    inputs = nft_inputs(1, seed=20)
    objective, _, data, _ = trained(awm_config(skip_first=True), tiny_transformer(), inputs, FlowStep().model_info(),
                                    tmp_path)
    plan = objective.plan(data, 1)
    # 16 samples in batches of 4, one batch per update; the grid [1, 0.9, 0.75, 0.5]: int(4 x 0.9) = 3 per batch.
    assert len(plan) == 4 and all(len(update) == 3 for update in plan)
    assert all(len(index) == 4 for update in plan for index, _, _ in update)
    assert {g for update in plan for _, g, _ in update} <= {1, 2, 3}  # skip_first: never sigma 1
    assert len({seed for update in plan for _, _, seed in update}) == 12
    again = objective.plan(data, 1)
    assert [(g, s) for u in again for _, g, s in u] == [(g, s) for u in plan for _, g, s in u]


def test_the_ema_follows_the_trained_weights_after_each_iteration(tmp_path):
    inputs = nft_inputs(1, seed=20)
    cfg = awm_config(ema_decay_schedule="constant", ema_decay=0.25)
    objective, trainer, data, _ = trained(cfg, tiny_transformer(), inputs, FlowStep().model_info(), tmp_path)
    policy = trainer.policy
    start = [p.detach() * 0 + 1.0 for p in policy.trainable]
    policy.extra["ema"] = [s.clone() for s in start]
    objective.finish(policy, updates=4)
    for ema, s, p in zip(policy.extra["ema"], start, policy.trainable):
        torch.testing.assert_close(ema, 0.25 * s + 0.75 * p.detach())


@pytest.mark.parametrize("direction", [1, -1])
def test_awm_lowers_the_flow_matching_error_of_high_advantage_images(tmp_path, direction):
    """Held-out images of the style with the positive advantage become easier to generate; a flipped sign fails."""
    _, trainer, _, _ = trained(awm_config(inner_epochs=2), tiny_transformer(), nft_inputs(direction, seed=20),
                               FlowStep().model_info(), tmp_path)
    moved = held_out_flow_matching_shift(trainer.model)
    assert moved * direction < 0, moved


def test_a_linear_ema_schedule_without_warmup_is_refused_at_startup():
    from rewardloop.config import ConfigError, load
    from workflow_helpers import ROOT

    base = ROOT / "configs/tiny_sd3_awm.yaml"
    with pytest.raises(ConfigError, match=r"^train\.awm\.ema_warmup_steps: the linear EMA schedule needs at least 1$"):
        load(base, {"train": {"awm": {"ema_decay_schedule": "linear", "ema_warmup_steps": 0}}})
    # the power schedule without warmup is the constant one (Flow-Factory's power_warmup_decay)
    assert load(base, {"train": {"awm": {"ema_decay_schedule": "power", "ema_warmup_steps": 0}}})["train"]["awm"]
    assert ema_decay("power", 0.4, 3, 0, 0.0) == 0.4

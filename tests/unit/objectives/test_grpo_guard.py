"""GRPO-Guard (train.grpo.guard): its ratio against the paper's identity and Flow-Factory's formula written
out here, the loss on a micro-batch, the direction on held-out transitions, and what it refuses.
Seconds each, on the tiny random-init SD3 transformer of objective_checks.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from objective_checks import train, trained
from objective_inputs import FlowStep, held_out_lean, rollout_inputs
from rewardloop.config import ConfigError, load
from rewardloop.objectives.grpo import guard_ratio

from workflow_helpers import ROOT


def test_the_guard_ratio_is_the_rollout_noise_times_the_mean_shift():
    """With x' = mu_old + s eps: (logp - logp_old) s + |mu - mu_old|^2 / (2 s) = mean(eps (mu - mu_old)),
    so the ratio is exactly 1 on the old policy and centred there for a small shift."""
    gen = torch.Generator().manual_seed(0)
    mu_old, eps, shift = (torch.randn(3, 4, 8, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    s = torch.tensor([0.3, 0.1, 0.05], dtype=torch.float64)
    x_next = mu_old + s.view(-1, 1, 1, 1) * eps
    mu = mu_old + 0.01 * shift

    def log_p(x, m):  # log N(x; m, s^2) averaged over the latent dims (flow_grpo's convention)
        ss = s.view(-1, 1, 1, 1)
        return (-((x - m) ** 2) / (2 * ss**2) - torch.log(ss) - 0.5 * math.log(2 * math.pi)).mean(dim=(1, 2, 3))

    got = guard_ratio(log_p(x_next, mu), log_p(x_next, mu_old), mu, mu_old, s)
    expected = torch.exp((eps * (mu - mu_old)).mean(dim=(1, 2, 3)))
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-9)
    assert torch.equal(guard_ratio(log_p(x_next, mu_old), log_p(x_next, mu_old), mu_old, mu_old, s),
                       torch.ones(3, dtype=torch.float64))
    # Flow-GRPO's own ratio for the same shift sits below 1 by mean((mu - mu_old)^2) / (2 s^2) in the log.
    plain = torch.exp(log_p(x_next, mu) - log_p(x_next, mu_old))
    assert (plain.log() - got.log() / s).mean() < 0


def test_grpo_guard_loss_equals_flow_factorys_on_a_micro_batch(tmp_path):
    step = FlowStep()
    leans = [1, -1] * 4
    inputs = rollout_inputs(step, step.denoiser(), leans, [1.5, -0.5, 0.2, -1.0, 2.0, -2.0, 0.7, -0.9], seed=10)
    clip = 0.05
    objective, trainer, data, _ = trained(step.config(clip_range=clip, kl_beta=0.0, guard=True), step.denoiser(),
                                          inputs, step.model_info(), tmp_path)
    index = torch.tensor([5, 0, 3, 6])
    rows = inputs.signal.iloc[index.numpy()]
    t = inputs.tensors

    def recorded(name):
        return torch.stack([t[f"trajectory/{s}/{name}"][0] for s in rows.sample_id]).double()

    x, next_x, old, mu_old = recorded("latents"), recorded("next_latents"), recorded("log_probs"), recorded("means")
    embeds = torch.stack([t[f"prompt_embeds/{p}"] for p in rows.prompt_id])
    mu = step.mean(trainer.model, x.float(), embeds, step.pooled(t, rows.prompt_id))
    s = step.scale
    log_p = (-((next_x - mu) ** 2) / (2 * s**2) - math.log(s) - 0.5 * math.log(2 * math.pi)).mean(dim=(1, 2, 3))
    ratio = torch.exp((log_p - old) * s + ((mu - mu_old) ** 2).mean(dim=(1, 2, 3)) / (2 * s))
    advantages = torch.tensor(rows.advantage.to_numpy())
    expected = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip)).mean()
    with torch.no_grad():
        got, logs = objective.loss(trainer.policy, data, (index, 0))
    assert (ratio - 1).abs().max() > 1e-3  # the LoRA moved
    assert logs["train/policy_loss"] == pytest.approx(expected.item(), abs=1e-5)
    assert logs["train/ratio_mean"] == pytest.approx(ratio.mean().item(), rel=1e-5)
    assert logs["train/clipfrac"] == pytest.approx(float(((ratio - 1).abs() > clip).double().mean()))


@pytest.mark.parametrize("direction", [1, -1])
def test_grpo_guard_raises_the_likelihood_of_high_advantage_transitions(tmp_path, direction):
    step = FlowStep()
    base = step.denoiser()
    leans = [1, -1] * 8
    inputs = rollout_inputs(step, base, leans, [direction * lean for lean in leans], seed=10)
    trained_model = train(step.config(guard=True), step.denoiser(), inputs, step.model_info(), tmp_path)
    lean = held_out_lean(step, base, trained_model)
    assert lean * direction > 0, lean


@pytest.mark.parametrize("overrides, family", [
    ({"generate": {"sde": {"type": "cps", "window_range": [0, 9], "num_sde_steps": 9}}}, "sd3"),
    ({"generate": {"sde": {"noise_level": 1.0}}}, "sd15"),
], ids=["cps", "sd15"])
def test_the_guard_is_refused_off_flow_grpo_steps(overrides, family):
    base = ROOT / ("configs/tiny_sd3_grpo.yaml" if family == "sd3" else "config.yaml")
    with pytest.raises(ConfigError, match=r"^train\.grpo\.guard: GRPO-Guard normalises Flow-GRPO's Gaussian SDE"):
        load(base, {**overrides, "train": {"loss": "grpo", "grpo": {"guard": True}}})


def test_guard_needs_the_recorded_means(tmp_path):
    step = FlowStep()
    inputs = rollout_inputs(step, step.denoiser(), [1, -1] * 4, [1.0, -1.0] * 4, seed=10)
    for key in [k for k in inputs.tensors if k.endswith("/means")]:
        del inputs.tensors[key]
    with pytest.raises(Exception, match=r"train\.grpo\.guard: the rollouts hold no trajectory/<id>/means"):
        trained(step.config(guard=True), step.denoiser(), inputs, step.model_info(), tmp_path)

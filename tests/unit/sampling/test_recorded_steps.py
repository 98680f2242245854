"""rewardloop.sampling.recorded_steps: the kind of recorded step training re-applies, per family kind.

The means and log-probs are compared with the papers' formulas as objective_checks.py writes them
(Flow-GRPO's SDE step, Coefficients-Preserving Sampling, DDIM), per sample with different constants."""

from __future__ import annotations

import math

import pytest
import torch

from objective_checks import (cps_log_likelihood, cps_mean_reference, ddim_mean_reference, flow_sde_mean,
                              gaussian_log_likelihood)
from rewardloop.sampling.recorded_steps import DDIMSteps, FlowSteps, recorded_steps

SHAPE = (3, 4, 2, 2)


def tensors(seed: int):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(SHAPE, generator=gen) for _ in range(3))  # prediction, latents, next latents


def test_the_kind_follows_the_family_and_the_recorded_sde_type():
    assert recorded_steps(False) == DDIMSteps()
    assert recorded_steps(True).dynamics.name == "flow_grpo"
    assert recorded_steps(True, 1).dynamics.name == "cps"
    assert recorded_steps(True).params == ("sigmas", "sigmas_next", "std")
    assert DDIMSteps().params == ("timesteps", "alphas", "alphas_prev", "std")


def test_flow_steps_match_flow_grpos_sde_step_per_sample():
    v, x, x_next = tensors(0)
    p = {"sigmas": torch.tensor([1.0, 0.8, 0.4]), "sigmas_next": torch.tensor([0.8, 0.5, 0.1]),
         "std": torch.tensor([0.7, 0.5, 0.3])}
    steps = recorded_steps(True, 0)
    assert torch.equal(steps.timestep(p, 1000), p["sigmas"] * 1000)
    mean = steps.mean(v, x, p)
    for i in range(3):
        sigma, sigma_next, std = (float(p[k][i]) for k in ("sigmas", "sigmas_next", "std"))
        expected = flow_sde_mean(v[i:i + 1].double(), x[i:i + 1], sigma, sigma_next, std)
        torch.testing.assert_close(mean[i:i + 1].double(), expected, rtol=1e-5, atol=1e-6)
        scale = std * math.sqrt(sigma - sigma_next)
        assert float(steps.transition_std(p)[i]) == pytest.approx(scale, rel=1e-6)
        expected_lp = gaussian_log_likelihood(x_next[i:i + 1], mean[i:i + 1], scale)
        assert float(steps.log_prob(x_next, mean, p)[i]) == pytest.approx(float(expected_lp), rel=1e-5)


def test_cps_steps_match_coefficients_preserving_sampling():
    v, x, x_next = tensors(1)
    p = {"sigmas": torch.tensor([0.9, 0.6, 0.3]), "sigmas_next": torch.tensor([0.6, 0.3, 0.0]),
         "std": torch.tensor([0.4, 0.2, 0.0])}
    steps = recorded_steps(True, 1)
    mean = steps.mean(v, x, p)
    for i in range(3):
        sigma, sigma_next, std = (float(p[k][i]) for k in ("sigmas", "sigmas_next", "std"))
        expected = cps_mean_reference(v[i:i + 1], x[i:i + 1], sigma, sigma_next, std)
        torch.testing.assert_close(mean[i:i + 1].double(), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(steps.log_prob(x_next, mean, p).double(), cps_log_likelihood(x_next, mean),
                               rtol=1e-5, atol=1e-6)


def test_ddim_steps_match_ddim_with_eta():
    eps, x, x_next = tensors(2)
    p = {"timesteps": torch.tensor([901.0, 501.0, 101.0]), "alphas": torch.tensor([0.05, 0.3, 0.9]),
         "alphas_prev": torch.tensor([0.1, 0.5, 0.95]), "std": torch.tensor([0.3, 0.2, 0.1])}
    steps = recorded_steps(False)
    assert torch.equal(steps.timestep(p, 1000), p["timesteps"])  # DDIM records the UNet's own timestep
    mean = steps.mean(eps, x, p)
    log_prob = steps.log_prob(x_next, mean, p)
    for i in range(3):
        a_t, a_prev, std = (float(p[k][i]) for k in ("alphas", "alphas_prev", "std"))
        expected = ddim_mean_reference(eps[i:i + 1], x[i:i + 1], a_t, a_prev, std)
        torch.testing.assert_close(mean[i:i + 1].double(), expected, rtol=1e-5, atol=1e-6)
        assert float(log_prob[i]) == pytest.approx(float(gaussian_log_likelihood(x_next[i:i + 1], mean[i:i + 1], std)),
                                                   rel=1e-5)

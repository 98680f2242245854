"""The flow-matching SDE step and its log-probability, against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from rewardloop.sampling.sde import sde_std, sde_step, step_mean, transition_log_prob


def test_std_follows_flow_grpo_formula():
    sigmas = torch.tensor([1.0, 0.75, 0.5, 0.0])
    assert sde_std(sigmas, 1, 0.7) == pytest.approx(0.7 * math.sqrt(0.75 / 0.25))
    # sigma = 1 would divide by zero: the first step uses sigma_max = sigmas[1] in the denominator
    assert sde_std(sigmas, 0, 0.7) == pytest.approx(0.7 * math.sqrt(1.0 / 0.25))


def test_zero_std_is_the_euler_step():
    x, v = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    next_x, mean = sde_step(v, x, 0.6, 0.4, 0.0)
    assert torch.allclose(next_x, x + v * (0.4 - 0.6), atol=1e-7) and torch.equal(next_x, mean)


def test_mean_and_log_prob_by_hand():
    x, v = torch.randn(2, 1, 3, 3), torch.randn(2, 1, 3, 3)
    sigma, sigma_next, std = 0.8, 0.5, torch.tensor([0.3, 1.2])
    dt = sigma_next - sigma
    s = std.view(2, 1, 1, 1)
    expected_mean = x * (1 + s**2 / (2 * sigma) * dt) + v * (1 + s**2 * (1 - sigma) / (2 * sigma)) * dt
    mean = step_mean(v, x, sigma, sigma_next, std)
    assert torch.allclose(mean, expected_mean, atol=1e-6)
    noise = torch.randn_like(x)
    next_x, _ = sde_step(v, x, sigma, sigma_next, std, noise)
    assert torch.allclose(next_x, mean + s * math.sqrt(-dt) * noise, atol=1e-6)
    log_prob = transition_log_prob(next_x, mean, sigma, sigma_next, std)
    normal = torch.distributions.Normal(mean, s * math.sqrt(-dt))
    assert torch.allclose(log_prob, normal.log_prob(next_x).mean(dim=(1, 2, 3)), atol=1e-5)
    assert log_prob.dtype == torch.float32 and log_prob.shape == (2,)


def test_noise_is_required_for_a_stochastic_step():
    with pytest.raises(ValueError, match=r"^sde_step: noise is required for a step with std > 0$"):
        sde_step(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), 0.5, 0.25, 0.7)

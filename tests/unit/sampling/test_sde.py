"""The flow-matching SDE step and its log-probability, against hand computations; the step helpers (with
DDIM's mean and the KL to the reference) on the latents' device and in fp32."""

from __future__ import annotations

import math

import pytest
import torch

from meta_device import META, on_meta
from objective_checks import ddim_mean_reference, flow_sde_mean
from rewardloop.objectives.grpo import kl_to_reference
from rewardloop.sampling.ddim_logprob import ddim_mean
from rewardloop.sampling.sde import gaussian_log_prob, sde_std, sde_step, step_mean, transition_log_prob


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


# --- the flow SDE's std where 1 - sigma_max is 0 ------------------------------------------------------------

def test_a_flow_step_without_a_finite_std_is_an_ode_step():
    """std_t = a sqrt(s / (1 - s)) (s = 1 uses sigmas[1]) has no finite value when that sigma is 1."""
    assert sde_std(torch.tensor([1.0, 1.0, 0.5, 0.0]), 0, 0.7) == 0.0
    assert sde_std(torch.tensor([1.0, 1.0, 0.5, 0.0]), 2, 0.7) == pytest.approx(0.7)
    assert sde_std(torch.tensor([1.0, 0.0]), 0, 0.7) == pytest.approx(0.7)  # one step: 1 - sigmas[1] = 1


# --- the step helpers keep to the latents' device and compute in fp32 ---------------------------------------

def test_the_step_helpers_stay_on_the_latents_device_with_python_constants():
    x, v, noise = on_meta((2, 4, 8, 8), (2, 4, 8, 8), (2, 4, 8, 8))
    assert step_mean(v, x, 0.9, 0.75, 0.3).device == META
    assert ddim_mean(v, x, 0.5, 0.7, 0.2).device == META
    assert gaussian_log_prob(x, v, 0.4).device == META
    assert transition_log_prob(x, v, 0.9, 0.75, 0.3).device == META
    assert all(t.device == META for t in sde_step(v, x, 0.9, 0.75, 0.3, noise))
    assert kl_to_reference(x, v, 0.3).device == META


def test_the_step_helpers_compute_in_fp32_whatever_the_constants_dtype():
    """Per-sample constants in float64 (numpy, parquet) give fp32 results equal to the papers' formulas."""
    gen = torch.Generator().manual_seed(0)
    x, v, noise = (torch.randn(2, 4, 8, 8, generator=gen) for _ in range(3))

    def f64(*values):
        return torch.tensor(values, dtype=torch.float64)

    sigma, sigma_next, std = f64(0.9, 0.6), f64(0.75, 0.4), f64(0.3, 0.5)
    mean = step_mean(v, x, sigma, sigma_next, std)
    assert mean.dtype == torch.float32
    for i in range(2):
        expected = flow_sde_mean(v[i: i + 1].double(), x[i: i + 1], float(sigma[i]), float(sigma_next[i]), float(std[i]))
        assert torch.allclose(mean[i: i + 1].double(), expected, atol=1e-5)
    stepped, _ = sde_step(v, x, sigma, sigma_next, std, noise)
    assert stepped.dtype == torch.float32
    a_t, a_prev, ddim_std = f64(0.3, 0.5), f64(0.6, 0.8), f64(0.2, 0.1)
    ddim = ddim_mean(v, x, a_t, a_prev, ddim_std)
    assert ddim.dtype == torch.float32
    for i in range(2):
        expected = ddim_mean_reference(v[i: i + 1], x[i: i + 1], float(a_t[i]), float(a_prev[i]), float(ddim_std[i]))
        assert torch.allclose(ddim[i: i + 1].double(), expected, atol=1e-5)
    scale = f64(0.5, 2.0)
    log_prob = gaussian_log_prob(noise, x, scale)
    assert log_prob.dtype == torch.float32
    expected = torch.distributions.Normal(x.double(), scale.view(2, 1, 1, 1)).log_prob(noise.double()).mean((1, 2, 3))
    assert torch.allclose(log_prob.double(), expected, atol=1e-5)
    assert transition_log_prob(noise, x, sigma, sigma_next, std).dtype == torch.float32
    kl = kl_to_reference(x, v, f64(0.3, 0.6))
    assert kl.dtype == torch.float32
    expected = ((x.double() - v.double()) ** 2).mean((1, 2, 3)) / (2 * torch.tensor([0.3, 0.6], dtype=torch.float64) ** 2)
    assert torch.allclose(kl.double(), expected, rtol=1e-5)

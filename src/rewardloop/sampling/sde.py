"""The flow-matching SDE step with its Gaussian log-probability (Flow-GRPO), in fp32.

Flow-GRPO turns the deterministic Euler step of a rectified-flow sampler into an SDE with the same
marginals, so each step is a Gaussian policy whose log-probability can be recomputed in training:

    std_t  = a * sqrt(sigma / (1 - sigma))            (a = noise level; sigma = 1 uses sigmas[1])
    mean   = x * (1 + std_t^2 / (2 sigma) * dt) + v * (1 + std_t^2 (1 - sigma) / (2 sigma)) * dt
    x_next = mean + std_t * sqrt(-dt) * eps,          dt = sigma_next - sigma < 0

and log N(x_next; mean, (std_t sqrt(-dt))^2) is averaged (not summed) over the latent dimensions,
as in flow_grpo's ``sde_step_with_logprob``. With ``std_t = 0`` the step is exactly the Euler (ODE)
step ``x + v dt``, so one function serves the SDE and ODE steps of a mixed trajectory.
"""

from __future__ import annotations

import math

import torch

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def sde_std(sigmas: torch.Tensor, index: int, noise_level: float) -> float:
    """std_t of step ``index`` of the sigma schedule ``sigmas`` (length steps + 1, ending at 0)."""
    sigma = float(sigmas[index])
    sigma_max = float(sigmas[1]) if len(sigmas) > 1 else 0.0
    denominator = 1 - (sigma_max if sigma >= 1 else sigma)
    return noise_level * math.sqrt(sigma / denominator) if denominator > 0 else 0.0


def per_sample(value, like: torch.Tensor) -> torch.Tensor:
    """A scalar or [B] tensor as [B, 1, ..., 1] in fp32 on ``like``'s device."""
    value = torch.as_tensor(value, dtype=torch.float32, device=like.device)
    return value.reshape(-1, *([1] * (like.ndim - 1)))


def step_mean(velocity: torch.Tensor, sample: torch.Tensor, sigma, sigma_next, std) -> torch.Tensor:
    """The mean of the SDE transition (fp32); ``sigma``, ``sigma_next``, ``std`` are scalars or [B]."""
    velocity, sample = velocity.float(), sample.float()
    sigma, sigma_next, std = (per_sample(v, sample) for v in (sigma, sigma_next, std))
    dt = sigma_next - sigma
    return (sample * (1 + std**2 / (2 * sigma) * dt)
            + velocity * (1 + std**2 * (1 - sigma) / (2 * sigma)) * dt)


def gaussian_log_prob(sample: torch.Tensor, mean: torch.Tensor, scale) -> torch.Tensor:
    """log N(sample; mean, scale^2) in fp32, averaged over all but the batch dimension -> [B]."""
    scale = per_sample(scale, mean)
    log_prob = -((sample.float().detach() - mean) ** 2) / (2 * scale**2) - torch.log(scale) - _HALF_LOG_2PI
    return log_prob.mean(dim=tuple(range(1, log_prob.ndim)))


def transition_log_prob(next_sample: torch.Tensor, mean: torch.Tensor, sigma, sigma_next, std) -> torch.Tensor:
    """log N(next_sample; mean, (std sqrt(-dt))^2), averaged over all but the batch dimension -> [B]."""
    scale = per_sample(std, mean) * torch.sqrt(per_sample(sigma, mean) - per_sample(sigma_next, mean))
    return gaussian_log_prob(next_sample, mean, scale)


def sde_step(velocity, sample, sigma, sigma_next, std, noise: torch.Tensor | None = None):
    """One step: returns (next sample, its mean). ``noise`` (standard normal) is required where std > 0."""
    mean = step_mean(velocity, sample, sigma, sigma_next, std)
    std_t = per_sample(std, mean)
    if noise is None:
        if bool((std_t > 0).any()):
            raise ValueError("sde_step: noise is required for a step with std > 0")
        return mean, mean
    scale = std_t * torch.sqrt(per_sample(sigma, mean) - per_sample(sigma_next, mean))
    return mean + scale * noise.float(), mean

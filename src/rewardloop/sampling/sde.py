"""The stochastic flow-matching steps with their log-probabilities, in fp32: Flow-GRPO's SDE and CPS.

Flow-GRPO turns the deterministic Euler step of a rectified-flow sampler into an SDE with the same
marginals, so each step is a Gaussian policy whose log-probability can be recomputed in training:

    std_t  = a * sqrt(sigma / (1 - sigma))            (a = noise level; sigma = 1 uses sigmas[1])
    mean   = x * (1 + std_t^2 / (2 sigma) * dt) + v * (1 + std_t^2 (1 - sigma) / (2 sigma)) * dt
    x_next = mean + std_t * sqrt(-dt) * eps,          dt = sigma_next - sigma < 0

and log N(x_next; mean, (std_t sqrt(-dt))^2) is averaged (not summed) over the latent dimensions,
as in flow_grpo's ``sde_step_with_logprob``. With ``std_t = 0`` the step is exactly the Euler (ODE)
step ``x + v dt``, so one function serves the SDE and ODE steps of a mixed trajectory.

``generate.sde.type: cps`` is Coefficients-Preserving Sampling (Wang & Yu, 2025, arXiv 2509.05952,
as flow_grpo's ``sde_type='cps'``), which keeps the noise coefficients of the rectified-flow
interpolation exact, with x0_hat = x - sigma v and x1_hat = x + (1 - sigma) v:

    std_t  = sigma_next * sin(a * pi / 2)
    mean   = x0_hat (1 - sigma_next) + x1_hat sqrt(sigma_next^2 - std_t^2)
    x_next = mean + std_t * eps
    log p  = -mean((x_next - mean)^2)                 (flow_grpo drops the Gaussian's constants)

with ``std_t = 0`` it is the Euler step too. A CPS step into sigma_next = 0 has no noise (std_t = 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from rewardloop.lazy_torch import torch

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


def _with_noise(mean: torch.Tensor, std, scale, noise: torch.Tensor | None, name: str):
    """(mean + scale * noise, mean); without noise only where std is 0 everywhere (an ODE step)."""
    if noise is None:
        if bool((per_sample(std, mean) > 0).any()):
            raise ValueError(f"{name}: noise is required for a step with std > 0")
        return mean, mean
    return mean + scale * noise.float(), mean


def sde_step(velocity, sample, sigma, sigma_next, std, noise: torch.Tensor | None = None):
    """One step: returns (next sample, its mean). ``noise`` (standard normal) is required where std > 0."""
    mean = step_mean(velocity, sample, sigma, sigma_next, std)
    scale = per_sample(std, mean) * torch.sqrt(per_sample(sigma, mean) - per_sample(sigma_next, mean))
    return _with_noise(mean, std, scale, noise, "sde_step")


# --- Coefficients-Preserving Sampling (CPS) -------------------------------------------------------

def cps_std(sigmas: torch.Tensor, index: int, noise_level: float) -> float:
    """CPS's std_t = sigma_next * sin(a pi / 2) of step ``index``."""
    return float(sigmas[index + 1]) * math.sin(noise_level * math.pi / 2)


def cps_mean(velocity: torch.Tensor, sample: torch.Tensor, sigma, sigma_next, std) -> torch.Tensor:
    """x0_hat (1 - sigma_next) + x1_hat sqrt(sigma_next^2 - std^2) in fp32."""
    velocity, sample = velocity.float(), sample.float()
    sigma, sigma_next, std = (per_sample(v, sample) for v in (sigma, sigma_next, std))
    x0 = sample - sigma * velocity
    x1 = sample + (1 - sigma) * velocity
    return x0 * (1 - sigma_next) + x1 * torch.sqrt((sigma_next**2 - std**2).clamp(min=0))


def cps_log_prob(next_sample: torch.Tensor, mean: torch.Tensor, sigma=None, sigma_next=None, std=None) -> torch.Tensor:
    """flow_grpo's CPS log-prob: -mean((x_next - mean)^2) over all but the batch dimension -> [B]."""
    return -((next_sample.float().detach() - mean) ** 2).mean(dim=tuple(range(1, mean.ndim)))


def cps_step(velocity, sample, sigma, sigma_next, std, noise: torch.Tensor | None = None):
    """One CPS step: returns (next sample, its mean)."""
    mean = cps_mean(velocity, sample, sigma, sigma_next, std)
    return _with_noise(mean, std, per_sample(std, mean), noise, "cps_step")


@dataclass(frozen=True)
class Dynamics:
    """One stochastic step type (``generate.sde.type``): its std, mean, step and log-prob functions."""

    name: str
    std: Callable
    mean: Callable
    step: Callable
    log_prob: Callable


DYNAMICS = {
    "flow_grpo": Dynamics("flow_grpo", sde_std, step_mean, sde_step, transition_log_prob),
    "cps": Dynamics("cps", cps_std, cps_mean, cps_step, cps_log_prob),
}
SDE_TYPES = tuple(DYNAMICS)  # the code recorded in latents.safetensors (rollout/sde_type) is the index


def get_dynamics(name: str) -> Dynamics:
    if name not in DYNAMICS:
        raise ValueError(f"generate.sde.type: unknown {name!r} (expected one of {', '.join(DYNAMICS)})")
    return DYNAMICS[name]

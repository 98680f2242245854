"""The recorded stochastic steps of a rollout as training re-applies them: one kind per family kind.

A recorded step is a Gaussian transition x_t -> x_next whose mean comes from the denoiser's
prediction. Its constants are stored per step in latents.safetensors (``trajectory/<id>/<param>``):

* flow steps (a flow-matching family): sigmas, sigmas_next and the step's std_t; the mean and the
  log-prob are the step type's (Flow-GRPO's SDE or CPS, :mod:`rewardloop.sampling.sde`);
* DDIM steps (a DDPM-style family, eta > 0): the timestep, alphas_cumprod at t and t_prev and the std
  (:mod:`rewardloop.sampling.ddim_logprob`).

GRPO asks the kind for the names it loads, the denoiser's timestep, the mean and the log-prob, and
so never asks which family it trains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from rewardloop.lazy_torch import torch

from rewardloop.sampling.sde import SDE_TYPES, Dynamics, gaussian_log_prob, get_dynamics


@dataclass(frozen=True)
class FlowSteps:
    """Recorded flow steps of one step type (``generate.sde.type``)."""

    dynamics: Dynamics
    params: tuple[str, ...] = ("sigmas", "sigmas_next", "std")
    name: str = "flow"

    def timestep(self, p: Mapping[str, torch.Tensor], num_train_timesteps: int) -> torch.Tensor:
        return p["sigmas"] * num_train_timesteps

    def mean(self, prediction, latents, p) -> torch.Tensor:
        return self.dynamics.mean(prediction, latents, p["sigmas"], p["sigmas_next"], p["std"])

    def log_prob(self, next_latents, mean, p) -> torch.Tensor:
        return self.dynamics.log_prob(next_latents, mean, p["sigmas"], p["sigmas_next"], p["std"])

    def transition_std(self, p) -> torch.Tensor:
        """The transition's standard deviation std_t sqrt(sigma - sigma_next) (GRPO-Guard's scale)."""
        return p["std"] * torch.sqrt(p["sigmas"] - p["sigmas_next"])


@dataclass(frozen=True)
class DDIMSteps:
    """Recorded DDIM steps with eta > 0 (DDPO)."""

    params: tuple[str, ...] = ("timesteps", "alphas", "alphas_prev", "std")
    name: str = "ddim"

    def timestep(self, p: Mapping[str, torch.Tensor], num_train_timesteps: int) -> torch.Tensor:
        return p["timesteps"]

    def mean(self, prediction, latents, p) -> torch.Tensor:
        from rewardloop.sampling.ddim_logprob import ddim_mean

        return ddim_mean(prediction, latents, p["alphas"], p["alphas_prev"], p["std"])

    def log_prob(self, next_latents, mean, p) -> torch.Tensor:
        return gaussian_log_prob(next_latents, mean, p["std"])


def recorded_steps(flow_matching: bool, sde_type_code: int = 0) -> FlowSteps | DDIMSteps:
    """The kind of step a rollout recorded: flow steps of ``SDE_TYPES[sde_type_code]``, or DDIM steps."""
    return FlowSteps(get_dynamics(SDE_TYPES[sde_type_code])) if flow_matching else DDIMSteps()

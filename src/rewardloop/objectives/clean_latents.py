"""What the decoupled flow objectives (DiffusionNFT, AWM) share: they train on the rollouts' clean latents.

Their rollouts are plain ODE samples (no log-probs); training re-noises each clean latent x0 at a
timestep of the rollout's own (shifted) grid, x_t = (1 - t) x0 + t eps, and compares the velocity
the model predicts there, with the conditioning of the sample's prompt and no CFG (both reference
codes train without it); a family whose guidance is an embedding (FLUX.1-dev) has no CFG pass to
leave out and predicts at the rollout's guidance (``ModelFamily.cfg_free_scale``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rewardloop.lazy_torch import torch

from rewardloop.models.families import ModelFamily
from rewardloop.objectives.advantage_training import load_advantages
from rewardloop.objectives.registry import TrainingInputs


@dataclass
class CleanLatentData:
    """Final latents, advantages, conditioning of the samples and the rollouts' timestep grid (sigmas)."""

    latents: torch.Tensor
    advantages: torch.Tensor
    cond: dict  # the family's conditioning rows of the samples' prompts {key: [N, ...]}
    grid: torch.Tensor  # the N sigmas the rollout stepped from (the terminal 0 excluded)
    family: ModelFamily | None = None
    guidance_scale: float = 1.0  # what the velocity is predicted at (1: no guidance; see the module docstring)

    def __len__(self) -> int:
        return len(self.latents)

    def conditioning(self, index, device) -> dict[str, torch.Tensor]:
        return {key: value[index].to(device) for key, value in self.cond.items()}


def load_clean_latents(inputs: TrainingInputs, family: ModelFamily) -> CleanLatentData:
    table = load_advantages(inputs)
    get = inputs.tensor
    rollout_scale = float(inputs.tensors.get("rollout/guidance_scale", 1.0))
    return CleanLatentData(
        latents=torch.stack([get(f"latents/{s}") for s in table.sample_id]).float(),
        advantages=torch.tensor(table.advantage.to_numpy(), dtype=torch.float32),
        cond={key: torch.stack([get(f"{key}/{p}") for p in table.prompt_id]) for key in family.conditioning},
        grid=get("rollout/sigmas")[:-1].float(),
        family=family,
        guidance_scale=family.cfg_free_scale(rollout_scale),
    )


def seeded(*key: int) -> int:
    """A 32-bit seed that is a pure function of ``key`` (so a resumed run draws what the uninterrupted one did)."""
    return int(np.random.SeedSequence([int(k) for k in key]).generate_state(1)[0])


def noised(x0: torch.Tensor, t: torch.Tensor, noise_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_t, eps): x_t = (1 - t) x0 + t eps with eps drawn from ``noise_seed`` (on the CPU, then moved)."""
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(noise_seed)).to(x0.device)
    tt = t.view(-1, *[1] * (x0.ndim - 1))
    return (1 - tt) * x0 + tt * noise, noise


def conditional_velocity(policy, module, data: CleanLatentData, x_t, t, cond, num_train_timesteps: int) -> torch.Tensor:
    """The velocity ``module`` predicts at (x_t, t) for the prompts' conditioning (no CFG), in fp32."""
    with policy.autocast():
        return data.family.predict(module, x_t, t * num_train_timesteps, cond, guidance_scale=data.guidance_scale,
                                   dtype=policy.model.dtype)


def velocity_kl(v: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """Both reference codes' velocity-space KL: mean over the batch of mean((v - v_other)^2) per sample."""
    return ((v - other) ** 2).mean(dim=tuple(range(1, v.ndim))).mean()

"""Seeded DDIM sampling with classifier-free guidance from a diffusers pipeline's components.

Every image has its own seed (initial noise and, for eta > 0, the per-step noise come from a
generator seeded with it), so a sample does not depend on its batch or shard. Text embeddings are
computed once per distinct prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm


@dataclass(frozen=True)
class SamplerSettings:
    steps: int
    guidance_scale: float
    eta: float
    resolution: int
    scheduler: str = "auto"  # generate.scheduler (see rewardloop.sampling.schedulers)

    def as_dict(self) -> dict:
        from rewardloop.sampling.schedulers import AUTO

        return {
            "sampler": "ddim" if self.scheduler == AUTO else self.scheduler,
            "steps": self.steps,
            "guidance_scale": self.guidance_scale,
            "eta": self.eta,
            "resolution": self.resolution,
        }


def sample_seed(base_seed: int, iteration: int, prompt_index: int, k: int) -> int:
    """A 31-bit seed that is a pure function of (seed, iteration, prompt, image index)."""
    return int(np.random.SeedSequence([base_seed, iteration + 1, prompt_index, k]).generate_state(1)[0] >> 1)


def initial_noise(seeds: Sequence[int], shape, device, dtype) -> torch.Tensor:
    noise = [torch.randn(shape, generator=torch.Generator().manual_seed(s)) for s in seeds]
    return torch.stack(noise).to(device=device, dtype=dtype)


@torch.no_grad()
def sample_latents(
    pipe,
    family,
    embeds: torch.Tensor,
    seeds: Sequence[int],
    settings: SamplerSettings,
    batch_size: int,
    progress: bool = True,
    desc: str = "generate",
    scheduler=None,
) -> torch.Tensor:
    """Denoise one image per (conditioning row, seed); returns the final latents [N, C, h, w] (fp32, CPU).

    ``family``: the pipeline's :class:`~rewardloop.models.families.ModelFamily`; ``embeds``: prompt
    embeddings [N, L, D], or the family's conditioning dict {key: [N, ...]}. ``scheduler``: the
    sampler (see :mod:`rewardloop.sampling.schedulers`); default DDIM on the pipeline's schedule,
    whatever scheduler class the pipeline ships.
    """
    from rewardloop.sampling.schedulers import build_sampler, inference_timesteps

    denoiser = getattr(pipe, family.denoiser)
    scheduler = scheduler or build_sampler(pipe.scheduler.config, "ddim")
    device, dtype = pipe.device, denoiser.dtype
    rows = {"prompt_embeds": embeds} if isinstance(embeds, torch.Tensor) else embeds
    uncond = family.unconditional(pipe) if settings.guidance_scale > 1.0 else None
    shape = family.latent_shape(pipe, settings.resolution)
    if type(scheduler).__name__ == "DDIMScheduler":  # no repeated or out-of-range step (PNDM repeats by design)
        inference_timesteps(scheduler, settings.steps)
    outputs = []
    for start in tqdm(range(0, len(seeds), batch_size), desc=desc, unit="batch", disable=not progress):
        batch_seeds = list(seeds[start : start + batch_size])
        cond = {k: v[start : start + batch_size].to(device=device) for k, v in rows.items()}
        # Latents and scheduler steps stay fp32 under a half-precision denoiser (its inputs are cast).
        latents = initial_noise(batch_seeds, shape, device, torch.float32) * scheduler.init_noise_sigma
        generators = [torch.Generator().manual_seed(s + 1) for s in batch_seeds]
        scheduler.set_timesteps(settings.steps, device=device)  # also resets a multistep sampler's state
        for t in scheduler.timesteps:
            model_in = scheduler.scale_model_input(latents, t)
            eps = family.predict(denoiser, model_in, t, cond, guidance_scale=settings.guidance_scale, uncond=uncond,
                                 dtype=dtype, pixel_size=settings.resolution)
            step_kwargs = {"eta": settings.eta, "generator": generators} if settings.eta > 0 else {}
            latents = scheduler.step(eps, t, latents, **step_kwargs).prev_sample
        outputs.append(latents.float().cpu())
    return torch.cat(outputs)

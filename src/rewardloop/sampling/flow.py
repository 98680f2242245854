"""Seeded sampling from SD3-family (rectified-flow) pipelines, optionally recording SDE steps.

Every image has its own seed: the initial noise comes from a generator seeded with it and the
per-step SDE noise from one seeded with ``seed + 1``, so a sample does not depend on its batch or
shard. Steps listed in ``sde_steps[i]`` are SDE steps (Flow-GRPO's, or CPS with ``sde_type="cps"``)
of noise level ``noise_level`` (see :mod:`rewardloop.sampling.sde`) and are recorded (latents, next latents, sigmas, std, log-prob, all fp32);
the other steps are Euler (ODE) steps. Classifier-free guidance runs the conditional and the
unconditional pass in one batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from tqdm.auto import tqdm

from rewardloop.sampling.sde import get_dynamics
from rewardloop.sampling.trajectory import StepRecorder


def t5_tokens(pipe) -> int:
    """T5 tokens of the conditioning: the pipeline default with T5; none without (they would all be zeros)."""
    return 256 if getattr(pipe, "text_encoder_3", None) is not None else 0


@torch.no_grad()
def encode_prompts(pipe, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt embeddings [N, L, D], pooled embeddings [N, P]) exactly as the SD3 pipeline computes them."""
    embeds, _, pooled, _ = pipe.encode_prompt(
        prompt=list(prompts), prompt_2=None, prompt_3=None, device=pipe.device,
        do_classifier_free_guidance=False, max_sequence_length=t5_tokens(pipe))
    return embeds, pooled


def latent_shape(pipe, resolution: int) -> tuple[int, int, int]:
    factor = pipe.vae_scale_factor
    if resolution % factor:
        raise ValueError(f"generate.resolution: {resolution} is not divisible by the VAE factor {factor}")
    return (pipe.transformer.config.in_channels, resolution // factor, resolution // factor)


def rollout_sigmas(pipe, scheduler, settings) -> torch.Tensor:
    """The sigmas a rollout of ``settings.steps`` steps at ``settings.resolution`` steps through (length
    steps + 1, ending at 0; fp32 on the CPU); the image's token count matters to a dynamically shifted grid."""
    from rewardloop.sampling.schedulers import flow_sigmas

    _, height, width = latent_shape(pipe, settings.resolution)
    patch = pipe.transformer.config.patch_size
    return flow_sigmas(scheduler, settings.steps, (height // patch) * (width // patch))


@dataclass
class Conditioning:
    """Text conditioning of a batch, with the unconditional rows when guidance is on."""

    embeds: torch.Tensor
    pooled: torch.Tensor
    uncond_embeds: torch.Tensor | None = None
    uncond_pooled: torch.Tensor | None = None


def guided_velocity(transformer, latents: torch.Tensor, sigma, cond: Conditioning, guidance_scale: float,
                    num_train_timesteps: int) -> torch.Tensor:
    """The (classifier-free guided) velocity at ``latents``; ``sigma`` a scalar or [B]; fp32 result."""
    batch = len(latents)
    timestep = torch.as_tensor(sigma, dtype=torch.float32, device=latents.device).reshape(-1).expand(batch)
    timestep = timestep * num_train_timesteps
    dtype = transformer.dtype
    if cond.uncond_embeds is not None and guidance_scale > 1.0:
        out = transformer(
            torch.cat([latents, latents]).to(dtype),
            encoder_hidden_states=torch.cat([cond.uncond_embeds, cond.embeds]).to(dtype),
            pooled_projections=torch.cat([cond.uncond_pooled, cond.pooled]).to(dtype),
            timestep=torch.cat([timestep, timestep]).to(dtype),
        ).sample.float()
        uncond, text = out.chunk(2)
        return uncond + guidance_scale * (text - uncond)
    return transformer(latents.to(dtype), encoder_hidden_states=cond.embeds.to(dtype),
                       pooled_projections=cond.pooled.to(dtype), timestep=timestep.to(dtype)).sample.float()


def unconditional(pipe, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    embeds, pooled = encode_prompts(pipe, [""])
    return embeds.expand(batch, -1, -1), pooled.expand(batch, -1)


@torch.no_grad()
def sample_flow(pipe, embeds: torch.Tensor, pooled: torch.Tensor, seeds: Sequence[int], settings, batch_size: int,
                sde_steps: Sequence[Sequence[int]] | None = None, noise_level: float = 0.0,
                progress: bool = True, desc: str = "generate", scheduler=None, sde_type: str = "flow_grpo"):
    """Denoise one image per (embedding row, seed).

    Returns (final latents [N, C, h, w] fp32 on the CPU, per-sample records: a list of dicts of the
    keys latents, next_latents, means, timesteps, sigmas, sigmas_next, std, log_probs stacked over that
    sample's SDE steps (``means``: the transition's mean, which GRPO-Guard compares with the trained
    policy's), or None when ``sde_steps`` is None). ``scheduler``: the flow-match Euler
    grid; default one built from the pipeline's scheduler config.
    """
    from rewardloop.sampling.schedulers import build_sampler

    transformer = pipe.transformer
    device = pipe.device
    scheduler = scheduler or build_sampler(pipe.scheduler.config, "flow")
    sigmas = rollout_sigmas(pipe, scheduler, settings)
    num_train = scheduler.config.num_train_timesteps
    shape = latent_shape(pipe, settings.resolution)
    use_cfg = settings.guidance_scale > 1.0
    sde_steps = [list(s) for s in sde_steps] if sde_steps is not None else None
    dynamics = get_dynamics(sde_type)
    stds = [dynamics.std(sigmas, j, noise_level) for j in range(settings.steps)]
    outputs, records = [], []
    for start in tqdm(range(0, len(seeds), batch_size), desc=desc, unit="batch", disable=not progress):
        batch_seeds = list(seeds[start: start + batch_size])
        n = len(batch_seeds)
        cond = Conditioning(embeds[start: start + n].to(device), pooled[start: start + n].to(device))
        if use_cfg:
            cond.uncond_embeds, cond.uncond_pooled = unconditional(pipe, n)
        latents = torch.stack([torch.randn(shape, generator=torch.Generator().manual_seed(s))
                               for s in batch_seeds]).to(device)
        generators = [torch.Generator().manual_seed(s + 1) for s in batch_seeds]
        batch_steps = sde_steps[start: start + n] if sde_steps is not None else [[] for _ in batch_seeds]
        recorder = StepRecorder(n)
        for j in range(settings.steps):
            sigma, sigma_next = float(sigmas[j]), float(sigmas[j + 1])
            is_sde = [j in steps for steps in batch_steps]
            std = torch.tensor([stds[j] if flag else 0.0 for flag in is_sde])
            noise = torch.stack([torch.randn(shape, generator=g) for g in generators]).to(device)
            velocity = guided_velocity(transformer, latents, sigma, cond, settings.guidance_scale, num_train)
            next_latents, mean = dynamics.step(velocity, latents, sigma, sigma_next, std.to(device), noise)
            if any(is_sde):
                log_probs = dynamics.log_prob(next_latents, mean, sigma, sigma_next,
                                              torch.where(std > 0, std, torch.ones_like(std)).to(device))
                recorder.add(is_sde, latents=latents, next_latents=next_latents, means=mean,
                             timesteps=sigma * num_train, sigmas=sigma, sigmas_next=sigma_next, std=std,
                             log_probs=log_probs)
            latents = next_latents
        outputs.append(latents.float().cpu())
        records += recorder.stacked()
    return torch.cat(outputs), (records if sde_steps is not None else None)

"""DDIM with eta > 0 as a Gaussian policy (DDPO-style), so the SD1.5 family can train with GRPO.

A DDIM step from timestep t to t_prev with eta > 0 samples
    x_prev ~ N(mean, std^2),  mean = sqrt(a_prev) x0_hat + sqrt(1 - a_prev - std^2) eps,
    x0_hat = (x - sqrt(1 - a_t) eps) / sqrt(a_t),  std = eta sqrt((1 - a_prev)/(1 - a_t) (1 - a_t/a_prev))
(a = alphas_cumprod), as in diffusers' DDIMScheduler.step and ddpo-pytorch's ddim_step_with_logprob;
its log-probability is averaged over the latent dimensions like the flow SDE's. The step strategy
picks the stochastic (recorded) steps; the others are deterministic DDIM (eta 0) steps.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from tqdm.auto import tqdm

from rewardloop.sampling.sde import gaussian_log_prob, per_sample
from rewardloop.sampling.trajectory import StepRecorder

def step_alphas(scheduler, t: int, steps: int) -> tuple[float, float]:
    """(alpha_prod at t, alpha_prod at the previous timestep) of a DDIM schedule of ``steps`` steps."""
    prev_t = t - scheduler.config.num_train_timesteps // steps
    a_t = float(scheduler.alphas_cumprod[t])
    a_prev = float(scheduler.alphas_cumprod[prev_t]) if prev_t >= 0 else float(scheduler.final_alpha_cumprod)
    return a_t, a_prev


def ddim_std(a_t: float, a_prev: float, eta: float) -> float:
    return eta * math.sqrt((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev))


def ddim_mean(eps: torch.Tensor, sample: torch.Tensor, a_t, a_prev, std) -> torch.Tensor:
    """Mean of the DDIM transition (fp32); ``a_t``, ``a_prev``, ``std`` are scalars or [B]."""
    eps, sample = eps.float(), sample.float()
    a_t, a_prev, std = (per_sample(v, sample) for v in (a_t, a_prev, std))
    x0 = (sample - torch.sqrt(1 - a_t) * eps) / torch.sqrt(a_t)
    return torch.sqrt(a_prev) * x0 + torch.sqrt((1 - a_prev - std**2).clamp(min=0)) * eps


@torch.no_grad()
def sample_ddim_recorded(pipe, family, cond, seeds: Sequence[int], settings, batch_size: int,
                         sde_steps: Sequence[Sequence[int]], eta: float, progress: bool = True,
                         desc: str = "generate", scheduler=None):
    """DDIM rollouts whose ``sde_steps[i]`` are eta > 0 steps, recorded; returns (latents, records).

    ``cond``: the family's conditioning {key: [N, ...]} (or the prompt embeddings [N, L, D]).
    ``scheduler``: a DDIMScheduler; default one built from the pipeline's schedule for recording
    (see :func:`rewardloop.sampling.schedulers.build_sampler`), whatever class the pipeline ships.
    """
    from rewardloop.sampling.ddim import initial_noise
    from rewardloop.sampling.schedulers import build_sampler, inference_timesteps

    unet, device = getattr(pipe, family.denoiser), pipe.device
    scheduler = scheduler or build_sampler(pipe.scheduler.config, "ddim", recorded=True)
    timesteps = inference_timesteps(scheduler, settings.steps)
    shape = family.latent_shape(pipe, settings.resolution)
    rows = {"prompt_embeds": cond} if isinstance(cond, torch.Tensor) else cond
    uncond = family.unconditional(pipe) if settings.guidance_scale > 1.0 else None
    outputs, records = [], []
    for start in tqdm(range(0, len(seeds), batch_size), desc=desc, unit="batch", disable=not progress):
        batch_seeds = list(seeds[start: start + batch_size])
        n = len(batch_seeds)
        batch_cond = {k: v[start: start + n].to(device) for k, v in rows.items()}
        latents = initial_noise(batch_seeds, shape, device, torch.float32)
        generators = [torch.Generator().manual_seed(s + 1) for s in batch_seeds]
        batch_steps = [list(s) for s in sde_steps[start: start + n]]
        recorder = StepRecorder(n)
        # Every step's noise and per-sample std (0: a deterministic step) drawn up front and moved to the device
        # at once (one copy a batch, not two a step); each generator draws in the same order as step by step.
        alphas = [step_alphas(scheduler, t, settings.steps) for t in timesteps]
        step_stds = torch.tensor([[ddim_std(a_t, a_prev, eta) if j in steps else 0.0 for steps in batch_steps]
                                  for j, (a_t, a_prev) in enumerate(alphas)])
        device_stds = step_stds.to(device)
        noises = torch.stack([torch.stack([torch.randn(shape, generator=g) for g in generators])
                              for _ in timesteps]).to(device)
        for j, t in enumerate(timesteps):
            (a_t, a_prev), std = alphas[j], step_stds[j]
            is_sde = [j in steps for steps in batch_steps]
            eps = family.predict(unet, latents, t, batch_cond, guidance_scale=settings.guidance_scale, uncond=uncond,
                                 pixel_size=settings.resolution)
            mean = ddim_mean(eps, latents, a_t, a_prev, device_stds[j])
            next_latents = mean + per_sample(device_stds[j], mean) * noises[j]
            if any(is_sde):
                log_probs = gaussian_log_prob(next_latents, mean, torch.where(std > 0, std, torch.ones_like(std)))
                recorder.add(is_sde, latents=latents, next_latents=next_latents, timesteps=float(t), alphas=a_t,
                             alphas_prev=a_prev, std=std, log_probs=log_probs)
            latents = next_latents
        outputs.append(latents.float().cpu())
        records += recorder.stacked()
    return torch.cat(outputs), records

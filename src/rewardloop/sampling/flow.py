"""Seeded sampling from rectified-flow pipelines (any flow-matching family), optionally recording SDE steps.

Every image has its own seed: the initial noise comes from a generator seeded with it and the
per-step SDE noise from one seeded with ``seed + 1``, so a sample does not depend on its batch or
shard. Steps listed in ``sde_steps[i]`` are SDE steps (Flow-GRPO's, or CPS with ``sde_type="cps"``)
of noise level ``noise_level`` (see :mod:`rewardloop.sampling.sde`) and are recorded (latents, next latents, sigmas, std, log-prob, all fp32);
the other steps are Euler (ODE) steps, or after the SDE window DPM-Solver++ on a compressed grid
(``dpm_tail_ratio``, MixGRPO-Flash: :mod:`rewardloop.sampling.dpm_solver`). The family's adapter predicts the velocity, guidance inside
(classifier-free guidance runs the conditional and the unconditional pass in one batch; a guidance
embedding needs no second pass).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from tqdm.auto import tqdm

from rewardloop.sampling.dpm_solver import compressed_grid, dpm_solver_pp_step
from rewardloop.sampling.sde import get_dynamics
from rewardloop.sampling.trajectory import StepRecorder


def rollout_sigmas(pipe, family, scheduler, settings) -> torch.Tensor:
    """The sigmas a rollout of ``settings.steps`` steps at ``settings.resolution`` steps through (length
    steps + 1, ending at 0; fp32 on the CPU); the image's token count matters to a dynamically shifted grid."""
    return family.sigmas(scheduler, settings.steps, family.image_tokens(pipe, settings.resolution))


@torch.no_grad()
def sample_flow(pipe, family, cond: Mapping[str, torch.Tensor], seeds: Sequence[int], settings, batch_size: int,
                sde_steps: Sequence[Sequence[int]] | None = None, noise_level: float = 0.0,
                progress: bool = True, desc: str = "generate", scheduler=None, sde_type: str = "flow_grpo",
                dpm_tail_ratio: float | None = None):
    """Denoise one image per (conditioning row, seed); ``cond``: the family's conditioning {key: [N, ...]}.

    Returns (final latents [N, C, h, w] fp32 on the CPU, per-sample records: a list of dicts of the
    keys latents, next_latents, means, timesteps, sigmas, sigmas_next, std, log_probs stacked over that
    sample's SDE steps (``means``: the transition's mean, which GRPO-Guard compares with the trained
    policy's), or None when ``sde_steps`` is None). ``scheduler``: the flow-match Euler
    grid; default one built from the pipeline's scheduler config. ``dpm_tail_ratio``: MixGRPO-Flash's compress
    ratio; the steps after a batch's SDE window (the same for all its samples) are then DPM-Solver++(2M) steps on
    the compressed tail of the grid.
    """
    from rewardloop.sampling.schedulers import build_sampler

    denoiser = getattr(pipe, family.denoiser)
    device = pipe.device
    scheduler = scheduler or build_sampler(pipe.scheduler.config, "flow")
    sigmas = rollout_sigmas(pipe, family, scheduler, settings)
    num_train = scheduler.config.num_train_timesteps
    shape = family.latent_shape(pipe, settings.resolution)
    uncond = family.unconditional(pipe) if family.uses_cfg and settings.guidance_scale > 1.0 else None
    sde_steps = [list(s) for s in sde_steps] if sde_steps is not None else None
    dynamics = get_dynamics(sde_type)
    stds = [dynamics.std(sigmas, j, noise_level) for j in range(settings.steps)]
    outputs, records = [], []
    for start in tqdm(range(0, len(seeds), batch_size), desc=desc, unit="batch", disable=not progress):
        batch_seeds = list(seeds[start: start + batch_size])
        n = len(batch_seeds)
        rows = {k: v[start: start + n].to(device) for k, v in cond.items()}
        latents = torch.stack([torch.randn(shape, generator=torch.Generator().manual_seed(s))
                               for s in batch_seeds]).to(device)
        generators = [torch.Generator().manual_seed(s + 1) for s in batch_seeds]
        batch_steps = sde_steps[start: start + n] if sde_steps is not None else [[] for _ in batch_seeds]
        # Every step's noise drawn up front and moved to the device at once (one copy a batch, not one a step);
        # each generator's draws come in the same order as step by step, so the values are the same. An ODE
        # rollout (eval, no SDE step anywhere) draws none: nothing would use them.
        noises = (torch.stack([torch.stack([torch.randn(shape, generator=g) for g in generators])
                               for _ in range(settings.steps)]).to(device) if sde_steps is not None else None)
        recorder = StepRecorder(n)
        # each step's per-sample noise std (0: an ODE step), on the device in one copy a batch
        step_stds = torch.tensor([[stds[j] if j in steps else 0.0 for steps in batch_steps]
                                  for j in range(settings.steps)])
        device_stds = step_stds.to(device)
        grid, last = sigmas, None
        if dpm_tail_ratio is not None and any(batch_steps):
            grid, last = _flash_grid(pipe, family, scheduler, settings, sigmas, batch_steps, dpm_tail_ratio)
        x0_prev = sigma_prev = None  # the step before's data prediction, for DPM-Solver++'s second order
        for j in range(len(grid) - 1):
            sigma, sigma_next = float(grid[j]), float(grid[j + 1])
            velocity = family.predict(denoiser, latents, sigma * num_train, rows, guidance_scale=settings.guidance_scale,
                                      uncond=uncond, pixel_size=settings.resolution)
            if last is not None:  # every step's data prediction is the next DPM-Solver++ step's history
                x0, previous = latents - sigma * velocity, (x0_prev, sigma_prev)
                x0_prev, sigma_prev = x0, sigma
                if j > last:  # after the window: DPM-Solver++, second order but into sigma 0
                    latents = dpm_solver_pp_step(latents, x0, sigma, sigma_next, *previous)
                    continue
            is_sde = [j in steps for steps in batch_steps]
            std = device_stds[j]
            noise = noises[j] if noises is not None else None
            next_latents, mean = dynamics.step(velocity, latents, sigma, sigma_next, std, noise)
            if any(is_sde):
                log_probs = dynamics.log_prob(next_latents, mean, sigma, sigma_next,
                                              torch.where(std > 0, std, torch.ones_like(std)))
                recorder.add(is_sde, latents=latents, next_latents=next_latents, means=mean,
                             timesteps=sigma * num_train, sigmas=sigma, sigmas_next=sigma_next, std=step_stds[j],
                             log_probs=log_probs)
            latents = next_latents
        outputs.append(latents.float().cpu())
        records += recorder.stacked()
    return torch.cat(outputs), (records if sde_steps is not None else None)


def _flash_grid(pipe, family, scheduler, settings, sigmas, batch_steps, ratio):
    """(the batch's grid with the steps after its SDE window compressed, the window's last step)."""
    from rewardloop.sampling.schedulers import shifted_sigmas

    windows = {tuple(steps) for steps in batch_steps}
    if len(windows) != 1:
        raise ValueError(f"dpm_tail_ratio: the samples of a batch must share their SDE steps (MixGRPO's window), "
                         f"got {sorted(windows)}")
    last = max(next(iter(windows)))
    tokens = family.image_tokens(pipe, settings.resolution)
    return compressed_grid(sigmas, last, ratio, lambda unshifted: shifted_sigmas(scheduler, unshifted, tokens)), last

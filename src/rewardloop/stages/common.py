"""Pieces shared by the stages: timing, metrics files, rollout of prompt×seed grids."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator, Mapping, NamedTuple

import pandas as pd
import pyarrow as pa

from rewardloop.artifacts import IMAGE_TYPE, encode_png, write_json
from rewardloop.models.families import EMPTY_PROMPT

FLOW_SAMPLERS = {"flow_grpo": "flow_sde", "cps": "flow_cps"}  # samples.parquet's sampler, by generate.sde.type
DPM_TAIL = "+dpmsolver++"  # ... and after it, where the steps after the SDE window are DPM-Solver++ (MixGRPO-Flash)


class SDEPlan(NamedTuple):
    """A recorded rollout's stochastic steps (``generate.sde``): the noise level, each sample's SDE step indices
    in rollout order, the step type, and MixGRPO-Flash's compress ratio where DPM-Solver++ follows the window."""

    noise_level: float
    steps: list[list[int]]
    type: str = "flow_grpo"
    dpm_tail_ratio: float | None = None


@contextlib.contextmanager
def timed(metrics: dict, key: str) -> Iterator[None]:
    """``metrics[key]`` = seconds the block took; ``metrics["perf/spans"][key]`` = its [start, end] as
    Unix times, so that a benchmark can tell which part of a run's wall time some job computed in."""
    started, wall_start = time.perf_counter(), time.time()
    yield
    metrics[key] = round(time.perf_counter() - started, 3)
    metrics.setdefault("perf/spans", {})[key] = [round(wall_start, 3), round(time.time(), 3)]


def write_metrics(metrics: Mapping, path) -> None:
    write_json(dict(metrics), path)


def torch_setup(threads: int, device_name: str):
    import torch

    from rewardloop.models.loading import resolve_device

    torch.set_num_threads(max(1, threads))
    return resolve_device(device_name)


def rollout(pipe, family, prompts: pd.DataFrame, seeds: list[list[int]], settings, batch_size: int, id_prefix: str,
            progress: bool = True, desc: str = "generate", rows_slice: slice | None = None, sde=None):
    """Sample ``seeds[i]`` images for prompt row i from ``pipe``, a model of ``family``.

    Returns (rows with sample_id/prompt_id/prompt/group/seed/image + sampler settings,
    final latents [N, C, h, w], tensors to store: {"<key>/<prompt_id>": conditioning tensor} with the
    family's keys (its adapter's ``conditioning``); the empty prompt's as
    empty_prompt/<key>; for recorded rollouts ``trajectory/<sample_id>/<key>`` and rollout/guidance_scale;
    for flow models the sigma grid, rollout/sigmas).
    ``rows_slice``: only those samples (a shard; every prompt is still encoded together, so the
    conditioning equals the unsharded run's), with the conditioning of their prompts only.
    ``sde``: GRPO rollouts, an :class:`SDEPlan` (noise level, SDE step indices of each sample, ...) for all samples
    in row order (prompt by prompt, then seed by seed; a shard takes its ``rows_slice``); those steps
    are stochastic (flow SDE or CPS for a flow-matching family, DDIM with eta = noise level for a UNet) and recorded.
    """
    import torch

    from rewardloop.sampling.schedulers import build_sampler, sampler_name

    cond = {k: v.float().cpu() for k, v in family.encode(pipe, prompts.prompt.tolist()).items()}
    rows, row_index = [], []
    for i, (prompt_id, prompt) in enumerate(zip(prompts.prompt_id, prompts.prompt)):
        for group, seed in enumerate(seeds[i]):
            rows.append({"sample_id": f"{id_prefix}-{prompt_id}-{group:02d}", "prompt_id": prompt_id,
                         "prompt": prompt, "group": group, "seed": seed})
            row_index.append(i)
    sde_steps = list(sde.steps) if sde else None
    sde_type = sde.type if sde else "flow_grpo"
    if rows_slice is not None:
        rows, row_index = rows[rows_slice], row_index[rows_slice]
        sde_steps = sde_steps[rows_slice] if sde else None
    row_cond = {k: v[torch.tensor(row_index, dtype=torch.long)] for k, v in cond.items()}
    # The sampler comes from the shipped scheduler's config, never its class (see sampling.schedulers).
    scheduler = build_sampler(pipe.scheduler.config, sampler_name(settings.scheduler, family.flow_matching),
                              recorded=sde is not None)
    latents, records = _sample(pipe, family, row_cond, [r["seed"] for r in rows], settings, batch_size,
                               sde.noise_level if sde else 0.0, sde_steps, progress, desc, scheduler, sde_type,
                               sde.dpm_tail_ratio if sde else None)
    images = family.decode_images(pipe, latents, batch_size)
    for row, image in zip(rows, images):
        row["image"] = encode_png(image, row["sample_id"] + ".png")
        row.update(settings.as_dict())
        if family.flow_matching:  # Euler steps, SDE ones where recorded; DDIM's eta does not apply
            sampler = FLOW_SAMPLERS[sde_type] + (DPM_TAIL if sde.dpm_tail_ratio else "") if sde else "flow_euler"
            row.update(sampler=sampler, eta=float(sde.noise_level) if sde else 0.0)
        elif sde:  # DDIM, eta = the noise level on the recorded steps
            row.update(sampler="ddim_recorded", eta=float(sde.noise_level))
    used = {row["prompt_id"] for row in rows}
    tensors = {f"{k}/{pid}": v[i] for k, v in cond.items() for i, pid in enumerate(prompts.prompt_id) if pid in used}
    # train.proportion_empty_prompts swaps in the empty prompt's conditioning: cache it too.
    empty = family.encode(pipe, [""])
    tensors.update({f"{EMPTY_PROMPT}/{k}": v[0].float().cpu() for k, v in empty.items()})
    if family.unconditional_key != EMPTY_PROMPT:  # what the rollout guided against, for training to guide alike
        tensors.update({f"{family.unconditional_key}/{k}": v[0].float().cpu()
                        for k, v in family.unconditional(pipe).items()})
    if sde:
        _add_records(tensors, rows, records, settings, sde_type)
    if family.flow_matching:  # the timestep grid the rollout stepped from (DiffusionNFT trains at these)
        from rewardloop.sampling.flow import rollout_sigmas

        tensors["rollout/sigmas"] = rollout_sigmas(pipe, family, scheduler, settings)
        # What a CFG-free objective predicts at when the guidance is an embedding (ModelFamily.cfg_free_scale).
        tensors["rollout/guidance_scale"] = torch.tensor(float(settings.guidance_scale))
    return pd.DataFrame(rows), latents, tensors


def _sample(pipe, family, cond, seeds, settings, batch_size, noise_level, sde_steps, progress, desc, scheduler,
            sde_type="flow_grpo", dpm_tail_ratio=None):
    """(final latents, records of the SDE steps or None) by the family's sampler."""
    if family.flow_matching:
        from rewardloop.sampling.flow import sample_flow

        return sample_flow(pipe, family, cond, seeds, settings, batch_size,
                           sde_steps=sde_steps, noise_level=noise_level, progress=progress, desc=desc,
                           scheduler=scheduler, sde_type=sde_type, dpm_tail_ratio=dpm_tail_ratio)
    if sde_steps is not None:  # GRPO on SD1.5: DDIM with eta > 0 on the recorded steps (DDPO)
        from rewardloop.sampling.ddim_logprob import sample_ddim_recorded

        return sample_ddim_recorded(pipe, family, cond, seeds, settings, batch_size, sde_steps,
                                    eta=noise_level, progress=progress, desc=desc, scheduler=scheduler)
    from rewardloop.sampling.ddim import sample_latents

    return sample_latents(pipe, family, cond, seeds, settings, batch_size, progress=progress, desc=desc,
                          scheduler=scheduler), None


def _add_records(tensors: dict, rows, records, settings, sde_type: str) -> None:
    """Recorded SDE steps as ``trajectory/<sample_id>/<key>``, plus what training re-applies: the guidance
    scale and the step type (``rollout/sde_type``, the index in sampling.sde.SDE_TYPES)."""
    import torch

    from rewardloop.sampling.sde import SDE_TYPES

    tensors["rollout/guidance_scale"] = torch.tensor(float(settings.guidance_scale))
    tensors["rollout/sde_type"] = torch.tensor(SDE_TYPES.index(sde_type))
    for row, record in zip(rows, records):
        tensors.update({f"trajectory/{row['sample_id']}/{key}": value for key, value in (record or {}).items()})


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    """DataFrame → Arrow with the image column typed as struct<bytes, path>."""
    table = pa.Table.from_pandas(frame.drop(columns=["image"], errors="ignore"), preserve_index=False)
    if "image" in frame:
        table = table.append_column("image", pa.array(frame["image"].tolist(), type=IMAGE_TYPE))
    return table

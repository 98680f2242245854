"""Pieces shared by the stages: timing, metrics files, rollout of prompt×seed grids."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator, Mapping

import pandas as pd
import pyarrow as pa

from rewardloop.artifacts import IMAGE_TYPE, encode_png, write_json


@contextlib.contextmanager
def timed(metrics: dict, key: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    metrics[key] = round(time.perf_counter() - started, 3)


def write_metrics(metrics: Mapping, path) -> None:
    write_json(dict(metrics), path)


def torch_setup(threads: int, device_name: str):
    import torch

    from rewardloop.models import resolve_device

    torch.set_num_threads(max(1, threads))
    return resolve_device(device_name)


def rollout(pipe, prompts: pd.DataFrame, seeds: list[list[int]], settings, batch_size: int, id_prefix: str,
            progress: bool = True, desc: str = "generate", sde=None):
    """Sample ``seeds[i]`` images for prompt row i.

    ``sde``: GRPO rollouts, ``(noise level, SDE step indices of each sample)`` with samples in row
    order (prompt by prompt, then seed by seed); those steps are stochastic (flow SDE for SD3,
    DDIM with eta = noise level for SD1.5) and recorded. Returns (rows with
    sample_id/prompt_id/prompt/group/seed/image + sampler settings, final latents [N, C, h, w],
    tensors to store: ``prompt_embeds/<prompt_id>``, plus ``pooled_embeds/<prompt_id>`` for SD3 and
    ``trajectory/<sample_id>/<key>`` for recorded rollouts).
    """
    rows = []
    for i, (prompt_id, prompt) in enumerate(zip(prompts.prompt_id, prompts.prompt)):
        for group, seed in enumerate(seeds[i]):
            rows.append({"sample_id": f"{id_prefix}-{prompt_id}-{group:02d}", "prompt_id": prompt_id,
                         "prompt": prompt, "group": group, "seed": seed, "_row": i})
    sample_seeds = [r["seed"] for r in rows]
    row_index = [r.pop("_row") for r in rows]
    from rewardloop import flow_sampling

    if flow_sampling.is_flow_pipeline(pipe):
        latents, tensors = _flow_rollout(pipe, prompts, rows, row_index, settings, batch_size, sde, progress, desc)
    else:
        from rewardloop.sampling import encode_prompts, sample_latents

        embeds = encode_prompts(pipe, prompts.prompt.tolist()).cpu()
        tensors = {f"prompt_embeds/{pid}": e for pid, e in zip(prompts.prompt_id, embeds)}
        if sde:  # GRPO on SD1.5: DDIM with eta > 0 on the recorded steps (DDPO)
            from rewardloop.ddim_logprob import sample_ddim_recorded

            latents, records = sample_ddim_recorded(pipe, embeds[row_index], sample_seeds, settings, batch_size,
                                                    sde[1], eta=sde[0], progress=progress, desc=desc)
            _add_records(tensors, rows, records, settings)
        else:
            latents = sample_latents(pipe, embeds[row_index], sample_seeds, settings, batch_size,
                                     progress=progress, desc=desc)
    from rewardloop.sampling import decode_latents

    images = decode_latents(pipe, latents, batch_size)
    flow = flow_sampling.is_flow_pipeline(pipe)
    for row, image in zip(rows, images):
        row["image"] = encode_png(image, row["sample_id"] + ".png")
        row.update(settings.as_dict())
        if flow:  # Euler steps, SDE ones where recorded; DDIM's eta does not apply
            row.update(sampler="flow_sde" if sde else "flow_euler", eta=float(sde[0]) if sde else 0.0)
        elif sde:  # DDIM, eta = the noise level on the recorded steps
            row.update(sampler="ddim_recorded", eta=float(sde[0]))
    return pd.DataFrame(rows), latents, tensors


def _flow_rollout(pipe, prompts, rows, row_index, settings, batch_size, sde, progress, desc):
    from rewardloop import flow_sampling

    embeds, pooled = (t.cpu() for t in flow_sampling.encode_prompts(pipe, prompts.prompt.tolist()))
    noise_level, steps = sde if sde else (0.0, None)
    latents, records = flow_sampling.sample_flow(
        pipe, embeds[row_index], pooled[row_index], [r["seed"] for r in rows], settings, batch_size,
        sde_steps=steps, noise_level=noise_level, progress=progress, desc=desc)
    tensors = {f"prompt_embeds/{pid}": e for pid, e in zip(prompts.prompt_id, embeds)}
    tensors.update({f"pooled_embeds/{pid}": p for pid, p in zip(prompts.prompt_id, pooled)})
    if steps is not None:
        _add_records(tensors, rows, records, settings)
    return latents, tensors


def _add_records(tensors: dict, rows, records, settings) -> None:
    """Recorded SDE steps as ``trajectory/<sample_id>/<key>``, plus the guidance scale training re-applies."""
    import torch

    tensors["rollout/guidance_scale"] = torch.tensor(float(settings.guidance_scale))
    for row, record in zip(rows, records):
        tensors.update({f"trajectory/{row['sample_id']}/{key}": value for key, value in (record or {}).items()})


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    """DataFrame → Arrow with the image column typed as struct<bytes, path>."""
    table = pa.Table.from_pandas(frame.drop(columns=["image"], errors="ignore"), preserve_index=False)
    if "image" in frame:
        table = table.append_column("image", pa.array(frame["image"].tolist(), type=IMAGE_TYPE))
    return table

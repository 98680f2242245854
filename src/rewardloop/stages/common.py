"""Pieces shared by the stages: timing, metrics files, rollout of prompt×seed grids."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator, Mapping

import pandas as pd
import pyarrow as pa

from rewardloop.artifacts import IMAGE_TYPE, encode_png, write_json
from rewardloop.families import EMPTY_PROMPT


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
            progress: bool = True, desc: str = "generate", rows_slice: slice | None = None):
    """Sample ``seeds[i]`` images for prompt row i.

    Returns (rows with sample_id/prompt_id/prompt/group/seed/image + sampler settings,
    final latents [N, C, h, w], {"<key>/<prompt_id>": conditioning tensor} with the family's keys,
    e.g. prompt_embeds and, for SDXL, pooled_embeds; plus the empty prompt's as empty_prompt/<key>).
    ``rows_slice``: only those samples (a shard; every prompt is still encoded together, so the
    conditioning equals the unsharded run's), with the conditioning of their prompts only.
    """
    import torch

    from rewardloop.sampling import decode_latents, encode_conditioning, sample_latents

    cond = {k: v.cpu() for k, v in encode_conditioning(pipe, prompts.prompt.tolist()).items()}
    rows, row_index = [], []
    for i, (prompt_id, prompt) in enumerate(zip(prompts.prompt_id, prompts.prompt)):
        for group, seed in enumerate(seeds[i]):
            rows.append({"sample_id": f"{id_prefix}-{prompt_id}-{group:02d}", "prompt_id": prompt_id,
                         "prompt": prompt, "group": group, "seed": seed})
            row_index.append(i)
    if rows_slice is not None:
        rows, row_index = rows[rows_slice], row_index[rows_slice]
    row_cond = {k: v[torch.tensor(row_index, dtype=torch.long)] for k, v in cond.items()}
    latents = sample_latents(pipe, row_cond, [r["seed"] for r in rows], settings, batch_size,
                             progress=progress, desc=desc)
    images = decode_latents(pipe, latents, batch_size)
    for row, image in zip(rows, images):
        row["image"] = encode_png(image, row["sample_id"] + ".png")
        row.update(settings.as_dict())
    used = {row["prompt_id"] for row in rows}
    cached = {f"{k}/{pid}": v[i] for k, v in cond.items() for i, pid in enumerate(prompts.prompt_id) if pid in used}
    # train.proportion_empty_prompts swaps in the empty prompt's conditioning: cache it too.
    empty = encode_conditioning(pipe, [""])
    cached.update({f"{EMPTY_PROMPT}/{k}": v[0].cpu() for k, v in empty.items()})
    return pd.DataFrame(rows), latents, cached


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    """DataFrame → Arrow with the image column typed as struct<bytes, path>."""
    table = pa.Table.from_pandas(frame.drop(columns=["image"], errors="ignore"), preserve_index=False)
    if "image" in frame:
        table = table.append_column("image", pa.array(frame["image"].tolist(), type=IMAGE_TYPE))
    return table

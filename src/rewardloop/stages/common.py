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
            progress: bool = True, desc: str = "generate", rows_slice: slice | None = None):
    """Sample ``seeds[i]`` images for prompt row i.

    Returns (rows with sample_id/prompt_id/prompt/group/seed/image + sampler settings,
    final latents [N, C, h, w], {prompt_id: text embedding}). ``rows_slice``: only those samples (a
    shard; every prompt is still encoded together, so embeddings equal the unsharded run's).
    """
    import torch

    from rewardloop.sampling import decode_latents, encode_prompts, sample_latents

    embeds = encode_prompts(pipe, prompts.prompt.tolist()).cpu()
    rows, row_embeds = [], []
    for i, (prompt_id, prompt) in enumerate(zip(prompts.prompt_id, prompts.prompt)):
        for group, seed in enumerate(seeds[i]):
            rows.append({"sample_id": f"{id_prefix}-{prompt_id}-{group:02d}", "prompt_id": prompt_id,
                         "prompt": prompt, "group": group, "seed": seed})
            row_embeds.append(embeds[i])
    if rows_slice is not None:
        rows, row_embeds = rows[rows_slice], row_embeds[rows_slice]
    latents = sample_latents(pipe, torch.stack(row_embeds), [r["seed"] for r in rows], settings, batch_size,
                             progress=progress, desc=desc)
    images = decode_latents(pipe, latents, batch_size)
    for row, image in zip(rows, images):
        row["image"] = encode_png(image, row["sample_id"] + ".png")
        row.update(settings.as_dict())
    used = {row["prompt_id"] for row in rows}
    return pd.DataFrame(rows), latents, {p: e for p, e in zip(prompts.prompt_id, embeds) if p in used}


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    """DataFrame → Arrow with the image column typed as struct<bytes, path>."""
    table = pa.Table.from_pandas(frame.drop(columns=["image"], errors="ignore"), preserve_index=False)
    if "image" in frame:
        table = table.append_column("image", pa.array(frame["image"].tolist(), type=IMAGE_TYPE))
    return table

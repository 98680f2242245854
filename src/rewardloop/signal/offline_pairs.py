"""Off-policy preference pairs (Pick-a-Pic layout) encoded once into the training cache format.

A Pick-a-Pic Parquet has ``caption``, two images ``jpg_0``/``jpg_1`` and ``label_0`` (1: jpg_0
preferred, 0: jpg_1, 0.5: tie). Each pair is resized (shorter side to the training resolution) and
cropped (centre, or a seeded random position with ``train.random_crop``; the same relative crop for
both images, as DiffusionDPO crops the pair together), VAE-encoded once and its caption
text-encoded once. The result has the layout of an iteration's ``pairs.parquet`` +
``latents.safetensors``, so training reads it like on-policy pairs. Horizontal flips
(``train.hflip``) are applied at training time to the cached latents, like on-policy ones.
"""

from __future__ import annotations

import io
from typing import Mapping

import numpy as np
import pandas as pd
import torch

from rewardloop.artifacts import provenance, read_table, write_table, write_tensors

COLUMNS = ("caption", "jpg_0", "jpg_1", "label_0")
PREFIX = "off"


class OfflinePairsError(ValueError):
    pass


def _image_bytes(cell, where: str) -> bytes:
    if isinstance(cell, dict):
        cell = cell.get("bytes")
    if not isinstance(cell, (bytes, bytearray)) or not cell:
        raise OfflinePairsError(f"{where}: expected encoded image bytes (or a struct with `bytes`)")
    return bytes(cell)


def read_offline_pairs(path, max_pairs: int | None, seed: int) -> pd.DataFrame:
    """Rows of caption, chosen (bytes), rejected (bytes); ties dropped; a seeded subset of ``max_pairs``."""
    table = read_table(path, required=list(COLUMNS), vouched=False).to_pandas()  # the user's pairs
    labels = table.label_0.astype(float)
    bad = ~labels.isin([0.0, 0.5, 1.0])
    if bad.any():
        raise OfflinePairsError(f"data.offline_pairs ({path}): label_0 must be 0, 0.5 or 1, row {int(bad.idxmax())} "
                                f"has {labels[bad].iloc[0]}")
    table = table[labels != 0.5].reset_index(drop=True)
    if table.empty:
        raise OfflinePairsError(f"data.offline_pairs ({path}): no pairs with a preference (all ties?)")
    if max_pairs and len(table) > max_pairs:
        keep = np.sort(np.random.default_rng([seed, 7]).choice(len(table), max_pairs, replace=False))
        table = table.iloc[keep].reset_index(drop=True)
    first_wins = table.label_0.astype(float) == 1.0
    return pd.DataFrame({
        "caption": table.caption.astype(str),
        "chosen": np.where(first_wins, table.jpg_0, table.jpg_1),
        "rejected": np.where(first_wins, table.jpg_1, table.jpg_0),
    })


def crop_position(seed: int, index: int, random_crop: bool) -> tuple[float, float]:
    """Relative (left, top) of the crop in [0, 1]: the centre, or seeded per pair."""
    if not random_crop:
        return 0.5, 0.5
    u, v = np.random.default_rng([seed, index]).random(2)
    return float(u), float(v)


def prepare_image(data: bytes, resolution: int, position: tuple[float, float]) -> torch.Tensor:
    """Decode, resize the shorter side to ``resolution``, crop a square at ``position``; [3, R, R] in [-1, 1]."""
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    scale = resolution / min(image.size)
    width, height = max(resolution, round(image.width * scale)), max(resolution, round(image.height * scale))
    image = image.resize((width, height), Image.BILINEAR)
    left = round(position[0] * (width - resolution))
    top = round(position[1] * (height - resolution))
    image = image.crop((left, top, left + resolution, top + resolution))
    array = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy())
    return array.permute(2, 0, 1).float().div(127.5).sub(1.0)


class PairImages(torch.utils.data.Dataset):
    """(chosen, rejected) pixel tensors of each pair, cropped at the same relative position."""

    def __init__(self, pairs: pd.DataFrame, resolution: int, random_crop: bool, seed: int, where: str):
        self.pairs, self.resolution, self.random_crop, self.seed, self.where = pairs, resolution, random_crop, seed, where

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int):
        row = self.pairs.iloc[i]
        position = crop_position(self.seed, i, self.random_crop)
        return tuple(prepare_image(_image_bytes(row[k], f"{self.where}: row {i} ({k})"), self.resolution, position)
                     for k in ("chosen", "rejected"))


@torch.no_grad()
def encode(cfg: Mapping, resolution: int, random_crop: bool, num_workers: int, pairs_out, latents_out,
           device="cpu", batch_size: int = 8) -> int:
    """cfg: seed, model, data. Encode the offline pairs once; return how many were written."""
    from rewardloop.models import loading as models
    from rewardloop.models.families import get_family

    path = cfg["data"]["offline_pairs"]
    pairs = read_offline_pairs(path, cfg["data"]["offline_max_pairs"], cfg["seed"])
    pipe = models.load_pipeline(cfg["model"], device=device)
    family = get_family(cfg["model"]["family"])
    vae = pipe.vae
    loader = torch.utils.data.DataLoader(PairImages(pairs, resolution, random_crop, cfg["seed"], str(path)),
                                         batch_size=batch_size, num_workers=num_workers)
    gen = torch.Generator(device=device).manual_seed(cfg["seed"])
    tensors, rows = {}, []
    for start, (chosen, rejected) in zip(range(0, len(pairs), batch_size), loader):
        pixels = torch.cat([chosen, rejected]).to(device=device, dtype=vae.dtype)
        latents = family.encode_pixels(vae, pixels, generator=gen).float().cpu()
        cond = family.encode(pipe, pairs.caption.iloc[start : start + len(chosen)].tolist())
        for j, (w, l) in enumerate(zip(*latents.chunk(2))):
            pid = f"{PREFIX}{start + j:07d}"
            rows.append({"prompt_id": pid, "prompt": pairs.caption.iloc[start + j],
                         "chosen": f"{pid}-w", "rejected": f"{pid}-l"})
            tensors[f"latents/{pid}-w"], tensors[f"latents/{pid}-l"] = w, l
            tensors.update({f"{k}/{pid}": v[j].cpu() for k, v in cond.items()})
    meta = provenance(cfg, None, models.model_reference(cfg["model"]))
    write_tensors(tensors, latents_out, meta=meta)
    write_table(pd.DataFrame(rows), pairs_out, meta=meta)
    return len(rows)

"""Small image tables laid out as generate and eval write them (samples.parquet, eval.parquet), for the
stage tests: flat-colour PNGs, one row per image, with the provenance a stage copies on."""

from __future__ import annotations

import pandas as pd
from PIL import Image

from rewardloop.artifacts import encode_png, provenance, write_table
from rewardloop.stages.common import to_arrow


def image_frame(colours, prompts: int = 2, iteration: int = 0, prefix: str = "i000") -> pd.DataFrame:
    """Rows of ``prompts`` prompts x len(colours) images: image k of every prompt is a flat 16 px ``colours[k]``."""
    rows = []
    for p in range(prompts):
        for group, colour in enumerate(colours):
            sid = f"{prefix}-p{p}-{group:02d}"
            rows.append({"sample_id": sid, "prompt_id": f"p{p}", "prompt": f"a shape {p}", "group": group,
                         "iteration": iteration, "seed": 100 * p + group,
                         "image": encode_png(Image.new("RGB", (16, 16), colour), sid + ".png")})
    return pd.DataFrame(rows)


def write_images(frame: pd.DataFrame, path, iteration: int | None = 0, model: str = "tiny@base") -> None:
    write_table(to_arrow(frame), path, meta=provenance({}, iteration, model))

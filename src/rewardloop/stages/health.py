"""health: image-health statistics (src/rewardloop/monitors/image_health.py) of one folder's images.

Writes ``<folder>/health.parquet``: one row per source (``eval``: the held-out eval images;
``rollout``: the iteration's rollouts) with ``iteration``, ``source``, ``images`` and each statistic.
"""

from __future__ import annotations

from typing import Mapping

import pyarrow as pa

from rewardloop.artifacts import decode_image, provenance, read_provenance, read_table, write_table
from rewardloop.monitors.image_health import health

COLUMNS = ("iteration", "source", "images")


def table_health(path) -> dict:
    frame = read_table(path, required=["sample_id", "prompt_id", "image"]).to_pandas()
    images = (decode_image(cell, f"{path}: sample {sid}") for cell, sid in zip(frame.image, frame.sample_id))
    return {"images": len(frame), **health(images, frame.prompt_id.tolist())}


def run(tables: Mapping[str, str], iteration: int, health_path) -> list[dict]:
    """``tables``: {source: samples.parquet or eval.parquet}; ``iteration`` -1 is the base model."""
    rows = [{"iteration": iteration, "source": source, **table_health(path)} for source, path in tables.items()]
    model = read_provenance(tables["eval"]).get("model")
    write_table(pa.Table.from_pylist(rows), health_path,
                meta=provenance({}, iteration if iteration >= 0 else None, model))
    return rows

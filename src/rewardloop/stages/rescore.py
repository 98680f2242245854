"""rescore: the archived rollouts and eval images of one folder (iter_XXX/ or base/) scored with one
held-out "gold" reward, nothing regenerated.

Writes ``<folder>/rescore/<name>.parquet``: one row per image with the sample keys, ``source``
(``rollout``: samples.parquet; ``eval``: eval.parquet), ``reward_<name>`` (the reward's raw value) and
``reward_details``; and ``<name>.json`` with ``gold/<name>/mean`` (eval images) and
``gold/<name>/rollout_mean``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import pandas as pd

from rewardloop.artifacts import provenance, read_provenance, read_table, write_table
from rewardloop.rewards.combine import parse_reward_specs
from rewardloop.runtime.sharding import gather_tables, shard_rows, summed_metrics
from rewardloop.stages.common import timed, to_arrow, write_metrics
from rewardloop.stages.score import SAMPLE_KEYS, decode_samples, score_frame

SOURCES = ("rollout", "eval")
METRIC_OF_SOURCE = {"eval": "mean", "rollout": "rollout_mean"}


def read_images(path, iteration: int) -> pd.DataFrame:
    """A samples.parquet or eval.parquet as scoring reads it (an eval table written before the
    ``iteration`` column existed gets it)."""
    frame = read_table(path, required=[k for k in SAMPLE_KEYS if k != "iteration"] + ["image"]).to_pandas()
    if "iteration" not in frame.columns:
        frame.insert(4, "iteration", iteration)
    return frame


def _images(tables: Mapping[str, str], iteration: int) -> pd.DataFrame:
    """Every source's images in one frame, in source order, with a ``source`` column."""
    frames = []
    for source, path in tables.items():
        images = read_images(path, iteration)
        images.insert(len(SAMPLE_KEYS), "source", source)
        frames.append(images)
    return pd.concat(frames, ignore_index=True)


def gold_means(name: str, scored: pd.DataFrame) -> dict:
    """``gold/<name>/mean`` (eval images) and ``gold/<name>/rollout_mean`` of a rescore table."""
    return {f"gold/{name}/{METRIC_OF_SOURCE[source]}": float(rows[f"reward_{name}"].mean())
            for source, rows in scored.groupby("source", sort=False)}


def run(cfg: Mapping, tables: Mapping[str, str], iteration: int, table_path, metrics_path, progress=True,
        shard: int = 0, shards: int = 1) -> dict:
    """cfg: ``gold`` (a rewards mapping of one reward), ``score`` (batch_size). ``tables``: {source: path}.

    ``iteration`` -1 is the base model. ``shard`` of ``shards`` (``score.shards``): only that run of
    batches of the folder's images, rollouts then eval ones; :func:`gather` joins the shards.
    """
    (name, _, _), = parse_reward_specs(cfg["gold"])
    batch_size = cfg["score"]["batch_size"]
    images = _images(tables, iteration)
    if shards > 1:
        images = images.iloc[shard_rows(len(images), batch_size, shards, shard, key="score.shards")]
    metrics: dict = {"iteration": iteration}
    with timed(metrics, "perf/rescore_time"):
        decoded = [image for source, path in tables.items()  # errors name the file of the image
                   for image in decode_samples(images[images.source == source], str(path))]
        scored = score_frame(images, cfg["gold"], batch_size, str(tables["eval"]), progress, images=decoded)
    scored = scored.drop(columns="reward")
    scored.insert(len(SAMPLE_KEYS), "source", images.source.to_numpy())
    upstream = read_provenance(tables["eval"])
    write_table(to_arrow(scored), table_path,
                meta=provenance(cfg, iteration if iteration >= 0 else None, upstream.get("model")))
    if shards == 1:
        metrics.update(gold_means(name, scored))
    else:
        metrics["shard"] = shard
    write_metrics(metrics, metrics_path)
    return metrics


def gather(cfg: Mapping, shard_tables, shard_metrics, table_path, metrics_path) -> dict:
    """The shards of one folder's rescoring joined into the table and metrics an unsharded job writes."""
    (name, _, _), = parse_reward_specs(cfg["gold"])
    table = gather_tables(shard_tables, table_path)
    parts = [json.loads(Path(path).read_text()) for path in shard_metrics]
    metrics = {"iteration": parts[0]["iteration"], **summed_metrics(parts, ["perf/rescore_time"]),
               **gold_means(name, table.to_pandas()), "shards": len(parts)}
    write_metrics(metrics, metrics_path)
    return metrics

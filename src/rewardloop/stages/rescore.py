"""rescore: the archived rollouts and eval images of one folder (iter_XXX/ or base/) scored with one
held-out "gold" reward, nothing regenerated.

Writes ``<folder>/rescore/<name>.parquet``: one row per image with the sample keys, ``source``
(``rollout``: samples.parquet; ``eval``: eval.parquet), ``reward_<name>`` (the reward's raw value) and
``reward_details``; and ``<name>.json`` with ``gold/<name>/mean`` (eval images) and
``gold/<name>/rollout_mean``.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from rewardloop.artifacts import provenance, read_provenance, read_table, write_table
from rewardloop.rewards.combine import parse_reward_specs
from rewardloop.stages.common import timed, to_arrow, write_metrics
from rewardloop.stages.score import SAMPLE_KEYS, score_frame

SOURCES = ("rollout", "eval")
METRIC_OF_SOURCE = {"eval": "mean", "rollout": "rollout_mean"}


def read_images(path, iteration: int) -> pd.DataFrame:
    """A samples.parquet or eval.parquet as scoring reads it (an eval table written before the
    ``iteration`` column existed gets it)."""
    frame = read_table(path, required=[k for k in SAMPLE_KEYS if k != "iteration"] + ["image"]).to_pandas()
    if "iteration" not in frame.columns:
        frame.insert(4, "iteration", iteration)
    return frame


def run(cfg: Mapping, tables: Mapping[str, str], iteration: int, table_path, metrics_path, progress=True) -> dict:
    """cfg: ``gold`` (a rewards mapping of one reward), ``score`` (batch_size). ``tables``: {source: path}.

    ``iteration`` -1 is the base model.
    """
    (name, _, _), = parse_reward_specs(cfg["gold"])
    metrics: dict = {"iteration": iteration}
    frames = []
    with timed(metrics, "perf/rescore_time"):
        for source, path in tables.items():
            images = read_images(path, iteration)
            scored = score_frame(images, cfg["gold"], cfg["score"]["batch_size"], str(path), progress)
            scored = scored.drop(columns="reward")
            scored.insert(len(SAMPLE_KEYS), "source", source)
            frames.append(scored)
            metrics[f"gold/{name}/{METRIC_OF_SOURCE[source]}"] = float(scored[f"reward_{name}"].mean())
    upstream = read_provenance(tables["eval"])
    write_table(to_arrow(pd.concat(frames, ignore_index=True)), table_path,
                meta=provenance(cfg, iteration if iteration >= 0 else None, upstream.get("model")))
    write_metrics(metrics, metrics_path)
    return metrics

"""score: every sample's reward (weighted sum) and each component, from samples.parquet."""

from __future__ import annotations

import pandas as pd

from rewardloop.artifacts import decode_image, provenance, read_provenance, read_table, write_table
from rewardloop.runtime.sharding import shard_rows
from rewardloop.stages.common import timed, write_metrics

SAMPLE_KEYS = ["sample_id", "prompt_id", "prompt", "group", "iteration", "seed"]  # as samples.parquet orders them


def decode_samples(samples: pd.DataFrame, where: str) -> list:
    return [decode_image(cell, f"{where}: sample {sid}") for cell, sid in zip(samples.image, samples.sample_id)]


def score_frame(samples: pd.DataFrame, rewards_cfg, batch_size: int, where: str, progress=True,
                images=None, metadata=None, reward_set=None) -> pd.DataFrame:
    """The sample keys plus ``reward``, ``reward_<name>`` and ``reward_details`` columns.

    ``images``: the samples already decoded (scoring them with several reward sets decodes once).
    ``metadata``: one JSON object per sample (its prompt's, e.g. GenEval's), for the rewards that take it.
    ``reward_set``: ``rewards_cfg``'s RewardSet already built (scoring several tables loads its models once).
    """
    from rewardloop.rewards.combine import RewardSet

    images = decode_samples(samples, where) if images is None else images
    reward_set = reward_set or RewardSet(rewards_cfg)
    scores = reward_set.score(images, samples.prompt.tolist(), batch_size=batch_size, metadata=metadata)
    return pd.concat([samples[SAMPLE_KEYS].reset_index(drop=True), scores.reset_index(drop=True)], axis=1)


def reward_stats(scores: pd.DataFrame, prefix: str) -> dict:
    """``{prefix}/reward/raw_mean`` and ``raw_std`` of the combined reward, ``{prefix}/reward_<name>/mean`` each."""
    stats = {
        f"{prefix}/reward/raw_mean": float(scores.reward.mean()),
        f"{prefix}/reward/raw_std": float(scores.reward.std(ddof=0)),
    }
    for column in scores.columns:
        if column.startswith("reward_") and column != "reward_details":
            stats[f"{prefix}/{column}/mean"] = float(scores[column].mean())
    return stats


def run(cfg, samples_path, scores_path, metrics_path, progress=True, shard: int = 0, shards: int = 1):
    """cfg: rewards, score. ``shard`` of ``shards``: only that run of batches of the samples."""
    metrics = {}
    samples = read_table(samples_path, required=SAMPLE_KEYS + ["image"]).to_pandas()
    if shards > 1:
        samples = samples.iloc[shard_rows(len(samples), cfg["score"]["batch_size"], shards, shard,
                                          key="score.shards")]
    with timed(metrics, "perf/score_time"):
        scores = score_frame(samples, cfg["rewards"], cfg["score"]["batch_size"], str(samples_path), progress)
    upstream = read_provenance(samples_path)
    meta = provenance(cfg, upstream.get("iteration"), upstream.get("model"))
    write_table(scores, scores_path, meta=meta, writer="score")
    metrics.update(reward_stats(scores, "rollout"))
    write_metrics(metrics, metrics_path)

"""gather: the shards of generate (score) into the samples/latents (scores) an unsharded job writes."""

from __future__ import annotations

import json
from pathlib import Path

from rewardloop.runtime.sharding import gather_tables, gather_tensors, summed_metrics
from rewardloop.stages.common import write_metrics
from rewardloop.stages.score import reward_stats


def _metrics(paths) -> list[dict]:
    return [json.loads(Path(path).read_text()) for path in paths]


def samples(shard_samples, shard_latents, shard_metrics, samples_path, latents_path, metrics_path):
    table = gather_tables(shard_samples, samples_path, writer="generate")
    gather_tensors(shard_latents, latents_path, writer="generate")
    parts = _metrics(shard_metrics)
    metrics = summed_metrics(parts, ["perf/model_load_time", "perf/rollout_time", "samples"])
    metrics.update({"iteration": parts[0]["iteration"], "shards": len(parts),
                    "prompts": len(set(table.column("prompt_id").to_pylist()))})
    write_metrics(metrics, metrics_path)


def scores(shard_scores, shard_metrics, scores_path, metrics_path):
    table = gather_tables(shard_scores, scores_path, writer="score")
    metrics = summed_metrics(_metrics(shard_metrics), ["perf/score_time"])
    metrics.update(reward_stats(table.to_pandas(), "rollout"))
    metrics["shards"] = len(shard_scores)
    write_metrics(metrics, metrics_path)

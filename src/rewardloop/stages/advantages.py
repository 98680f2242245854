"""advantages: GRPO group advantages from scores.parquet (replaces pairs when train.loss is grpo/nft)."""

from __future__ import annotations

from rewardloop.signal.advantages import compute_advantages
from rewardloop.artifacts import provenance, read_provenance, read_table, write_table
from rewardloop.stages.common import write_metrics


def run(cfg, scores_path, advantages_path, metrics_path):
    """cfg: advantages."""
    scores = read_table(scores_path, required=["sample_id", "prompt_id", "reward"]).to_pandas()
    adv_cfg = cfg["advantages"]
    table, metrics = compute_advantages(scores, adv_cfg["globalize_reward_std"], adv_cfg["adv_clip_max"])
    upstream = read_provenance(scores_path)
    write_table(table, advantages_path, meta=provenance(cfg, upstream.get("iteration"), upstream.get("model")))
    write_metrics(metrics, metrics_path)

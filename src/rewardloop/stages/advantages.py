"""advantages: group advantages from scores.parquet (the signal of the objectives trained on advantages)."""

from __future__ import annotations

from rewardloop.signal.advantages import compute_advantages
from rewardloop.artifacts import provenance, read_provenance, read_table, write_table
from rewardloop.stages.common import write_metrics


def run(cfg, scores_path, advantages_path, metrics_path, keep_tied_groups=False):
    """cfg: advantages. ``keep_tied_groups``: the objective trains on groups of equal rewards too (at A = 0)."""
    scores = read_table(scores_path, required=["sample_id", "prompt_id", "reward"]).to_pandas()
    adv_cfg = cfg["advantages"]
    table, metrics = compute_advantages(scores, adv_cfg["globalize_reward_std"], adv_cfg["adv_clip_max"],
                                        keep_tied_groups)
    upstream = read_provenance(scores_path)
    write_table(table, advantages_path, meta=provenance(cfg, upstream.get("iteration"), upstream.get("model")),
                writer="advantages")
    write_metrics(metrics, metrics_path)

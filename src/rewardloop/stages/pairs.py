"""pairs: DPO preference pairs from scores.parquet."""

from __future__ import annotations

from rewardloop.artifacts import provenance, read_provenance, read_table, write_table
from rewardloop.signal.pairing import build_pairs
from rewardloop.stages.common import write_metrics


def run(cfg, scores_path, pairs_path, metrics_path):
    """cfg: pairs."""
    scores = read_table(scores_path, required=["sample_id", "prompt_id", "reward"]).to_pandas()
    pairs = build_pairs(scores, strategy=cfg["pairs"]["strategy"], min_margin=cfg["pairs"]["min_margin"])
    upstream = read_provenance(scores_path)
    write_table(pairs, pairs_path, meta=provenance(cfg, upstream.get("iteration"), upstream.get("model")),
                writer="pairs")
    groups = scores.prompt_id.nunique()
    write_metrics(
        {
            "pairs/count": len(pairs),
            "pairs/margin_mean": float(pairs.margin.mean()) if len(pairs) else 0.0,
            "pairs/groups_without_pair": int(groups - pairs.prompt_id.nunique()),
        },
        metrics_path,
    )

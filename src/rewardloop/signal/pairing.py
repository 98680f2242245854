"""Diffusion-DPO preference pairs from a scores table (``sample_id, prompt_id, reward``).

Strategies, per prompt group:

* ``best_vs_worst``: the highest-reward sample against the lowest one;
* ``all_above_margin``: every pair whose reward difference exceeds ``min_margin``.

Pairs with ``margin <= min_margin`` (ties included) are dropped; groups of one give no pair.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

STRATEGIES = ("best_vs_worst", "all_above_margin")
PAIR_COLUMNS = ["prompt_id", "chosen", "rejected", "chosen_reward", "rejected_reward", "margin"]


def _check_scores(scores: pd.DataFrame) -> None:
    missing = [c for c in ("sample_id", "prompt_id", "reward") if c not in scores.columns]
    if missing:
        raise ValueError(f"scores table lacks column(s) {', '.join(missing)}")
    if scores["sample_id"].duplicated().any():
        dup = scores.loc[scores["sample_id"].duplicated(), "sample_id"].iloc[0]
        raise ValueError(f"scores table has duplicate sample_id {dup!r}")
    rewards = pd.to_numeric(scores["reward"], errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(rewards))
    if bad.size:
        sample_id = scores["sample_id"].iloc[bad[0]]
        raise ValueError(f"scores table has a non-finite reward for sample_id {sample_id!r}")


def build_pairs(
    scores: pd.DataFrame, strategy: str = "best_vs_worst", min_margin: float = 0.0
) -> pd.DataFrame:
    """Preference pairs with columns ``PAIR_COLUMNS``, sorted by prompt_id, chosen, rejected."""
    if strategy not in STRATEGIES:
        raise ValueError(
            f"unknown pairs.strategy {strategy!r}: expected one of {', '.join(STRATEGIES)}"
        )
    if not np.isfinite(min_margin) or min_margin < 0:
        raise ValueError(f"pairs.min_margin must be a finite number >= 0, got {min_margin!r}")
    _check_scores(scores)
    rows = []
    for prompt_id, group in scores.groupby("prompt_id", sort=True):
        # Highest reward first; sample_id breaks ties so the output is deterministic.
        ranked = group.sort_values(["reward", "sample_id"], ascending=[False, True])
        ranked = list(zip(ranked["sample_id"], ranked["reward"].astype(float)))
        if strategy == "best_vs_worst":
            lowest = min(r for _, r in ranked)
            worst = next(item for item in ranked if item[1] == lowest)
            candidates = [(ranked[0], worst)]
        else:
            candidates = combinations(ranked, 2)
        for (chosen, chosen_r), (rejected, rejected_r) in candidates:
            margin = chosen_r - rejected_r
            if margin > min_margin:
                rows.append((prompt_id, chosen, rejected, chosen_r, rejected_r, margin))
    pairs = pd.DataFrame(rows, columns=PAIR_COLUMNS)
    pairs = pairs.astype({c: "float64" for c in PAIR_COLUMNS[3:]})
    return pairs.sort_values(["prompt_id", "chosen", "rejected"], ignore_index=True)

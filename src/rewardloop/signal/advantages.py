"""GRPO advantages: each reward relative to its prompt group.

    A = (r - mean_group) / (std + 1e-4),   clipped to [-adv_clip_max, adv_clip_max]

The std is the population std (ddof = 0, as numpy's default that Flow-GRPO uses) of the group, or
of the whole batch with ``globalize_reward_std`` (the miles-diffusion recipe). Groups whose rewards
are all equal carry no signal and are dropped (their share is ``train/zero_std_ratio``), unless the
objective keeps them at A = 0 (``keep_tied_groups``: DiffusionNFT, where r = 1/2 still regularises).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

EPS = 1e-4


def compute_advantages(scores: pd.DataFrame, globalize_reward_std: bool, adv_clip_max: float,
                       keep_tied_groups: bool = False) -> tuple[pd.DataFrame, dict]:
    """scores: sample_id, prompt_id, reward. Returns (advantages table, metrics)."""
    grouped = scores.groupby("prompt_id", sort=False)["reward"]
    frame = scores[["sample_id", "prompt_id", "reward"]].copy()
    frame["group_mean"] = grouped.transform("mean")
    frame["group_std"] = grouped.transform(lambda r: float(np.std(r.to_numpy(), ddof=0)))
    std = float(np.std(scores.reward.to_numpy(), ddof=0)) if globalize_reward_std else frame.group_std
    frame["advantage"] = ((frame.reward - frame.group_mean) / (std + EPS)).clip(-adv_clip_max, adv_clip_max)
    zero = frame.group_std == 0
    groups = frame.prompt_id.nunique()
    zero_groups = frame.loc[zero, "prompt_id"].nunique()
    kept = frame if keep_tied_groups else frame.loc[~zero].reset_index(drop=True)
    metrics = {
        "train/zero_std_ratio": zero_groups / groups if groups else 0.0,
        "advantages/samples": len(kept),
        "advantages/abs_mean": float(kept.advantage.abs().mean()) if len(kept) else 0.0,
        "advantages/clipped_fraction": float((kept.advantage.abs() >= adv_clip_max).mean()) if len(kept) else 0.0,
    }
    return kept, metrics

"""GRPO group advantages: per-group and global std, clipping, zero-std groups dropped."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rewardloop.signal.advantages import EPS, compute_advantages


def _scores():
    return pd.DataFrame({
        "sample_id": [f"s{i}" for i in range(8)],
        "prompt_id": ["a"] * 3 + ["b"] * 3 + ["c"] * 2,
        "reward": [1.0, 2.0, 3.0, 0.0, 0.0, 4.0, 5.0, 5.0],
    })


def test_per_group_std_ddof0_and_zero_std_groups_dropped():
    table, metrics = compute_advantages(_scores(), globalize_reward_std=False, adv_clip_max=5.0)
    assert list(table.sample_id) == [f"s{i}" for i in range(6)]  # group c (all 5.0) dropped
    std_a = np.std([1.0, 2.0, 3.0])  # ddof 0
    assert table.advantage[:3].tolist() == pytest.approx([-1 / (std_a + EPS), 0.0, 1 / (std_a + EPS)])
    std_b = np.std([0.0, 0.0, 4.0])
    assert table.advantage[5] == pytest.approx((4 - 4 / 3) / (std_b + EPS))
    assert metrics["train/zero_std_ratio"] == pytest.approx(1 / 3)


def test_global_std_and_clipping():
    table, _ = compute_advantages(_scores(), globalize_reward_std=True, adv_clip_max=5.0)
    std = np.std(_scores().reward)
    assert table.advantage[0] == pytest.approx((1 - 2) / (std + EPS))
    clipped, metrics = compute_advantages(_scores(), globalize_reward_std=False, adv_clip_max=0.5)
    assert clipped.advantage.abs().max() == pytest.approx(0.5)
    assert metrics["advantages/clipped_fraction"] > 0


def test_the_table_and_its_metrics_exactly():
    table, metrics = compute_advantages(_scores(), globalize_reward_std=False, adv_clip_max=1.0)
    assert list(table.columns) == ["sample_id", "prompt_id", "reward", "group_mean", "group_std", "advantage"]
    assert list(table.index) == list(range(6))
    expected = [a for a in compute_advantages(_scores(), False, 5.0)[0].advantage.clip(-1.0, 1.0)]
    assert metrics == pytest.approx({
        "train/zero_std_ratio": 1 / 3, "advantages/samples": 6,
        "advantages/abs_mean": float(np.mean(np.abs(expected))),
        "advantages/clipped_fraction": float(np.mean(np.abs(expected) >= 1.0)),
    })


def test_tied_groups_are_kept_at_zero_advantage_for_the_objectives_that_ask():
    table, metrics = compute_advantages(_scores(), False, 5.0, keep_tied_groups=True)
    assert list(table.sample_id) == [f"s{i}" for i in range(8)]
    assert table.advantage[6:].tolist() == [0.0, 0.0] and metrics["advantages/samples"] == 8
    assert metrics["train/zero_std_ratio"] == pytest.approx(1 / 3)


def test_all_tied_and_empty_score_tables():
    tied = _scores().assign(reward=1.0)
    table, metrics = compute_advantages(tied, False, 5.0)
    assert table.empty and metrics == {"train/zero_std_ratio": 1.0, "advantages/samples": 0,
                                       "advantages/abs_mean": 0.0, "advantages/clipped_fraction": 0.0}
    _, metrics = compute_advantages(_scores().iloc[:0], False, 5.0)
    assert metrics["train/zero_std_ratio"] == 0.0

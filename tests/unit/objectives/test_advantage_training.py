"""rewardloop.objectives.advantage_training: what grpo, nft and awm share (the advantages table, the seeded
batches of the inner epochs, each rank's share of a batch, PPO's clipped surrogate)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from rewardloop.objectives.advantage_training import (clipped_policy_loss, epoch_batches, load_advantages,
                                                      rank_share, weighted)
from rewardloop.objectives.registry import ObjectiveError, TrainingInputs


def inputs(frame: pd.DataFrame) -> TrainingInputs:
    return TrainingInputs(frame, {}, "iter_000/advantages.parquet", "iter_000/latents.safetensors")


def test_load_advantages_returns_the_table_and_names_the_file_when_a_column_is_missing_or_it_is_empty():
    table = pd.DataFrame({"sample_id": ["a", "b"], "prompt_id": ["p", "p"], "advantage": [1.0, -1.0]})
    assert load_advantages(inputs(table)) is table
    with pytest.raises(ObjectiveError, match=r"^iter_000/advantages\.parquet: missing column\(s\) advantage$"):
        load_advantages(inputs(table.drop(columns="advantage")))
    with pytest.raises(ObjectiveError, match=r"^iter_000/advantages\.parquet: no samples with a non-zero advantage"):
        load_advantages(inputs(table.iloc[:0]))


def test_every_inner_epoch_is_a_permutation_in_batches_and_the_draw_is_seeded():
    batches = epoch_batches(10, 4, inner_epochs=2, seed=0, iteration=3)
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2]
    first, second = torch.cat(batches[:3]), torch.cat(batches[3:])
    assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(10))
    assert not torch.equal(first, second)  # each epoch draws its own order
    again = epoch_batches(10, 4, inner_epochs=2, seed=0, iteration=3)
    assert all(torch.equal(a, b) for a, b in zip(batches, again))
    other_iteration = epoch_batches(10, 4, inner_epochs=2, seed=0, iteration=4)
    assert not all(torch.equal(a, b) for a, b in zip(batches, other_iteration))


@pytest.mark.parametrize("count, processes", [(10, 3), (7, 7), (9, 2), (5, 1)])
def test_rank_shares_cover_the_batch_once_and_their_weighted_means_average_to_the_global_mean(count, processes):
    values = torch.arange(count, dtype=torch.float64) ** 2
    shares = [rank_share(count, rank, processes) for rank in range(processes)]
    covered = [i for rows, _ in shares for i in range(count)[rows]]
    assert covered == list(range(count))
    mean_over_ranks = sum(weight * values[rows].mean() for rows, weight in shares) / processes
    assert float(mean_over_ranks) == pytest.approx(float(values.mean()))


def test_a_batch_smaller_than_the_processes_is_refused_naming_the_keys():
    expected = (r"^a batch of 2 sample\(s\) does not split over 3 processes \(every rank needs one\): "
                r"raise train\.batch_size or lower train\.num_processes$")
    with pytest.raises(ObjectiveError, match=expected):
        rank_share(2, 0, 3)


def test_weighted_scales_the_loss_and_every_log_and_leaves_one_process_alone():
    loss, logs = torch.tensor(2.0), {"train/loss": 2.0, "train/kl": 0.5}
    assert weighted(loss, logs, 1.0) == (loss, logs)
    scaled_loss, scaled_logs = weighted(loss, logs, 1.5)
    assert float(scaled_loss) == 3.0 and scaled_logs == {"train/loss": 3.0, "train/kl": 0.75}


def test_clipped_surrogate_by_hand_and_with_a_ratio_of_its_own():
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.5, 0.5, 1.05, 0.95]))
    adv = torch.tensor([1.0, -1.0, 2.0, -2.0])
    loss, clipfrac, approx_kl = clipped_policy_loss(new, old, adv, clip_range=0.2)
    # per sample max(-A r, -A clip(r, 0.8, 1.2)): max(-1.5, -1.2), max(0.5, 0.8), max(-2.1, -2.1), max(1.9, 1.9)
    assert float(loss) == pytest.approx((-1.2 + 0.8 - 2.1 + 1.9) / 4, rel=1e-6)
    assert float(clipfrac) == 0.5
    assert float(approx_kl) == pytest.approx(0.5 * float((new ** 2).mean()), rel=1e-6)
    # The ratio given wins over exp(logp - logp_old) (which would give -0.925 here): nothing clipped, -mean(A).
    loss, clipfrac, _ = clipped_policy_loss(new, old, torch.ones(4), clip_range=0.2, ratio=torch.ones(4))
    assert float(loss) == pytest.approx(-1.0) and float(clipfrac) == 0.0

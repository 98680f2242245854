"""What the objectives trained on group advantages (grpo, nft, awm, dgpo) share: the advantages table, the
seeded batches of an inner epoch, each rank's share of a batch (and a sum over the ranks: DGPO's group sums),
and PPO's clipped surrogate.

Several processes: the plan is drawn for the global batch (``train.batch_size`` x processes), every
random draw of a micro-batch (noise, timesteps) is made for the global batch too, and each rank
trains on its rows (:func:`rank_share`). A rank's loss and logs are weighted by its share, so DDP's
mean of the ranks' gradients, and the logs' mean over ranks, are those of the global batch: P
processes of batch b train as one process of batch P b.
"""

from __future__ import annotations

import numpy as np
from rewardloop.lazy_torch import torch

from rewardloop.objectives.registry import TrainingInputs


def load_advantages(inputs: TrainingInputs):
    """advantages.parquet's rows (sample_id, prompt_id, advantage), refusing an empty table."""
    return inputs.rows(("sample_id", "prompt_id", "advantage"), "no samples with a non-zero advantage (every group tied?)")


def epoch_batches(data_len: int, batch_size: int, inner_epochs: int, seed: int, iteration: int) -> list[torch.Tensor]:
    """Sample indices of each batch: every inner epoch a seeded permutation of the samples, in batches."""
    batches = []
    for epoch in range(inner_epochs):
        state = np.random.SeedSequence([seed, iteration + 1, 7, epoch]).generate_state(1)[0]
        order = torch.randperm(data_len, generator=torch.Generator().manual_seed(int(state)))
        batches += [order[i: i + batch_size] for i in range(0, data_len, batch_size)]
    return batches


def rank_share(count: int, rank: int, processes: int) -> tuple[slice, float]:
    """(this rank's rows of a global batch of ``count``, the weight of its mean): numpy's array_split
    sizes, weight = rows x processes / count, so the mean over ranks of weight x (the rank's mean) is the
    mean over all ``count`` rows. One process: every row, weight 1."""
    from rewardloop.objectives.registry import ObjectiveError

    if processes == 1:
        return slice(0, count), 1.0
    if count < processes:
        raise ObjectiveError(f"a batch of {count} sample(s) does not split over {processes} processes (every rank "
                             "needs one): raise train.batch_size or lower train.num_processes")
    base, extra = divmod(count, processes)
    start, size = rank * base + min(rank, extra), base + (rank < extra)
    return slice(start, start + size), size * processes / count


def summed_over_processes(policy):
    """A function that sums a tensor over the training processes in place (all-reduce); None in one process."""
    if policy.num_processes == 1:
        return None
    import torch.distributed as dist

    return lambda tensor: dist.all_reduce(tensor, op=dist.ReduceOp.SUM)


def weighted(loss, logs: dict, weight: float):
    """A rank's loss and logs scaled by its share (:func:`rank_share`); unchanged in one process."""
    if weight == 1.0:
        return loss, logs
    return loss * weight, {key: value * weight for key, value in logs.items()}


def clipped_policy_loss(log_prob, old_log_prob, advantages, clip_range: float, ratio=None):
    """PPO's clipped surrogate; returns (loss, clipfrac, approx_kl = 0.5 * mean((logp - logp_old)^2)).
    ``ratio``: a ratio of its own (GRPO-Guard's) instead of exp(logp - logp_old)."""
    ratio = torch.exp(log_prob - old_log_prob) if ratio is None else ratio
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = torch.maximum(unclipped, clipped).mean()
    clipfrac = ((ratio - 1.0).abs() > clip_range).float().mean()
    approx_kl = 0.5 * ((log_prob - old_log_prob) ** 2).mean()
    return loss, clipfrac.detach(), approx_kl.detach()

"""What the objectives trained on group advantages (grpo, nft, awm) share: the advantages table, the
seeded batches of an inner epoch, and PPO's clipped surrogate."""

from __future__ import annotations

import numpy as np
import torch

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

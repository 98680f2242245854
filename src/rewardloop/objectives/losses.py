"""Training objectives on per-sample denoising losses.

``losses_*`` arguments are per-sample mean squared errors of the noise prediction, shape [B].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def denoising_mse(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample MSE over all non-batch dimensions, in fp32."""
    return (prediction.float() - target.float()).pow(2).mean(dim=tuple(range(1, prediction.ndim)))


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Diffusion-DPO (Wallace et al.), as in DiffusionDPO's train.py.

    inside = -0.5 * beta * ((l_w - l_l) - (ref_w - ref_l)); loss = -logsigmoid(inside).
    This beta is twice the one of the diffusers DPO example, which uses -beta * (...) with the
    0.5 folded in. Returns (mean loss, implicit accuracy = share of pairs with inside > 0).
    """
    inside = -0.5 * beta * ((policy_chosen - policy_rejected) - (ref_chosen - ref_rejected))
    loss = -F.logsigmoid(inside).mean()
    implicit_acc = (inside > 0).float().mean()
    return loss, implicit_acc

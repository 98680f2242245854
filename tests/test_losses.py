import math

import torch

from rewardloop.objectives.dpo import dpo_loss
from rewardloop.objectives.preference import denoising_mse


def test_dpo_loss_matches_hand_computation():
    pw, pl = torch.tensor([0.10, 0.30]), torch.tensor([0.20, 0.10])
    rw, rl = torch.tensor([0.15, 0.20]), torch.tensor([0.15, 0.20])
    beta = 10.0
    # inside_i = -0.5 * beta * ((pw - pl) - (rw - rl))
    inside = [-0.5 * 10 * ((0.10 - 0.20) - 0.0), -0.5 * 10 * ((0.30 - 0.10) - 0.0)]  # [0.5, -1.0]
    expected = sum(-math.log(1 / (1 + math.exp(-x))) for x in inside) / 2
    loss, acc = dpo_loss(pw, pl, rw, rl, beta)
    assert math.isclose(loss.item(), expected, rel_tol=1e-6)
    assert acc.item() == 0.5


def test_dpo_loss_is_log2_when_policy_equals_reference():
    losses = torch.tensor([0.3, 0.7, 0.2])
    loss, acc = dpo_loss(losses, losses.flip(0), losses, losses.flip(0), beta=5000)
    assert math.isclose(loss.item(), math.log(2), rel_tol=1e-6)
    assert acc.item() == 0.0


def test_dpo_gradient_lowers_chosen_loss_relative_to_rejected():
    pw = torch.tensor([0.5], requires_grad=True)
    pl = torch.tensor([0.5], requires_grad=True)
    loss, _ = dpo_loss(pw, pl, torch.tensor([0.5]), torch.tensor([0.5]), beta=1.0)
    loss.backward()
    assert pw.grad.item() > 0 > pl.grad.item()


def test_denoising_mse_is_per_sample():
    pred = torch.zeros(2, 1, 2, 2)
    target = torch.stack([torch.ones(1, 2, 2), 2 * torch.ones(1, 2, 2)])
    assert denoising_mse(pred, target).tolist() == [1.0, 4.0]

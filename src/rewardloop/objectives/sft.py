"""SFT on the chosen image of each pair: the plain denoising loss (DiffusionDPO's ``--train_method sft``)."""

from __future__ import annotations

from rewardloop.objectives.preference import TRAIN_STREAM, PairObjective
from rewardloop.objectives.registry import objective


@objective("sft")
class SFT(PairObjective):
    description = "Denoising loss on the chosen image of each pair (the ε-MSE on a UNet; the flow-matching loss on a flow family)."

    def loss(self, policy, data, micro, stream: int = TRAIN_STREAM):
        chosen, _, noise, timesteps, cond = self.batch_tensors(policy, data, micro, stream)
        losses = self.denoising_losses(policy, policy.module, chosen, noise, timesteps, cond)
        return losses.mean(), {"train/loss": losses.mean().item()}

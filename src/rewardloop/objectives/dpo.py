"""Diffusion-DPO (Wallace et al., 2023), as in DiffusionDPO's train.py (``--train_method dpo``).

For a pair (chosen w, rejected l) sharing noise ε and timestep t, with per-sample denoising errors
of the policy (l_w, l_l) and of the frozen reference (ref_w, ref_l):

    inside = -0.5 * beta * ((l_w - l_l) - (ref_w - ref_l)),   loss = -log sigmoid(inside)

``train.dpo.beta`` is DiffusionDPO's ``--beta_dpo`` (its README uses 5000 for SD1.5); it is twice the
value of the diffusers DPO example, which folds the 0.5 into beta. implicit_acc is the share of
pairs with inside > 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from rewardloop.lazy_torch import torch
from rewardloop.lazy_torch import functional as F

from rewardloop.objectives.options import option
from rewardloop.objectives.preference import TRAIN_STREAM, PairObjective
from rewardloop.objectives.registry import ObjectiveError, objective


def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta: float):
    """(mean loss, implicit accuracy) from per-sample denoising errors [B] (see the module docstring)."""
    inside = -0.5 * beta * ((policy_chosen - policy_rejected) - (ref_chosen - ref_rejected))
    loss = -F.logsigmoid(inside).mean()
    implicit_acc = (inside > 0).float().mean()
    return loss, implicit_acc


@dataclass(frozen=True)
class DPOOptions:
    beta: float | None = option(None, "Diffusion-DPO beta, as DiffusionDPO's --beta_dpo (inside = -0.5*beta*(...)); "
                                      "twice the value you would pass to the diffusers DPO example for the same "
                                      "strength. null: the model family's (5000 on a UNet's ε-MSE, DiffusionDPO's "
                                      "README; 100 on a flow family's velocity MSE, flow_grpo config/dpo.py).",
                                exclusiveMinimum=0)
    reference: str = option("base", "The frozen reference: base = the base model (the LoRA disabled), previous = "
                                    "model(it-1), the model the iteration starts from (online DPO).",
                            enum=["base", "previous"])


@objective("dpo")
class DPO(PairObjective):
    Options = DPOOptions
    description = "Diffusion-DPO on preference pairs (the ε-MSE on a UNet; the flow-matching loss on a flow family)."
    curves = ("train/loss", "train/implicit_acc")
    preflight_checks = ("start_loss",)
    moved_keys = {"beta": "beta", "reference": "reference"}

    def reference(self) -> str:
        return self.options.reference

    def loss(self, policy, data, micro, stream: int = TRAIN_STREAM):
        chosen, rejected, noise, timesteps, cond = self.batch_tensors(policy, data, micro, stream)
        inputs = (torch.cat([chosen, rejected]), torch.cat([noise, noise]), torch.cat([timesteps, timesteps]),
                  {k: torch.cat([v, v]) for k, v in cond.items()})
        policy_w, policy_l = self.denoising_losses(policy, policy.module, *inputs).chunk(2)
        with torch.no_grad(), policy.reference() as reference:
            ref_w, ref_l = self.denoising_losses(policy, reference, *inputs).chunk(2)
        if self.options.beta is None:  # config validation fills the family's value
            raise ObjectiveError("train.dpo.beta: null reached training; load the config with rewardloop.config")
        loss, acc = dpo_loss(policy_w, policy_l, ref_w, ref_l, self.options.beta)
        return loss, {"train/loss": loss.item(), "train/implicit_acc": acc.item()}

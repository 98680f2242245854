"""DiffusionNFT (Zheng et al., 2025), as NVlabs/DiffusionNFT's ``scripts/train_nft_sd3.py`` trains SD3.5-M.

Rollouts are plain ODE samples of the *old* policy (no log-probs, no CFG); training uses only
their clean latents x0 and advantages. Each sample is trained at its rollout's own (shifted)
timestep grid: a seeded permutation of the grid per sample and inner epoch, of which the first
``int(steps * timestep_fraction)`` are used, each with fresh noise, x_t = (1 - t) x0 + t eps. With
the trained velocity v, the old policy's v_old (no grad) and the reference's v_ref (LoRA disabled):

    v+ = beta v + (1 - beta) v_old,          v- = (1 + beta) v_old - beta v
    x0± = x_t - t v±,                        L± = mean((x0± - x0)^2) / sg(max(mean|x0± - x0|, 1e-5))
    r = clip(A, -m, m) / (2 m) + 1/2         (m = advantages.adv_clip_max, the reference's 5)
    loss = (m / beta) mean_B(r L+ + (1 - r) L-) + kl_beta mean_B mean((v - v_ref)^2)

(means over latent dims, the adaptive weight in float64). An optimizer step averages the gradients
of ``gradient_accumulation_steps`` batches x the trained timesteps. The old policy is a second
copy of the LoRA weights, kept across iterations (``checkpoint/old/``), soft-updated once per
iteration after training: old <- d old + (1 - d) current, d = min(rate * (global_step - flat), max)
(0 before ``flat`` steps), global_step = optimizer steps so far.

Departures from the reference code, all stated in docs/flow-rl.md: rollouts use the Euler ODE (the
reference uses a 2nd-order DPM solver; the algorithm is solver-agnostic); the reference's separate
EMA of the LoRA used only for its evaluations and checkpoints (``train.ema``, shared with its GRPO
script) is not kept; the rollouts' float timesteps are fed to the transformer as they are in training.
"""

from __future__ import annotations

from dataclasses import dataclass

from rewardloop.lazy_torch import torch

from rewardloop.objectives.advantage_training import epoch_batches, rank_share, weighted
from rewardloop.objectives.clean_latents import (CleanLatentData, conditional_velocity, load_clean_latents, noised,
                                                 seeded, velocity_kl)
from rewardloop.objectives.options import option
from rewardloop.objectives.registry import Objective, TrainingInputs, objective

SOURCE = "NVlabs/DiffusionNFT scripts/train_nft_sd3.py"


def optimality(advantages: torch.Tensor, clip_max: float) -> torch.Tensor:
    """r in [0, 1]: 1/2 at zero advantage, 1 at +clip_max and above, 0 at -clip_max and below."""
    return advantages.clamp(-clip_max, clip_max) / (2 * clip_max) + 0.5


def adaptive_x0_loss(x0_prediction: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """Per-sample mean((x0_hat - x0)^2) / sg(max(mean|x0_hat - x0|, 1e-5)), the weight in float64."""
    dims = tuple(range(1, x0.ndim))
    with torch.no_grad():
        weight = (x0_prediction.double() - x0.double()).abs().mean(dim=dims, keepdim=True).clamp(min=1e-5)
    return ((x0_prediction - x0) ** 2 / weight).mean(dim=dims)


def nft_policy_loss(v, v_old, x_t, x0, t, r, beta: float, adv_clip_max: float) -> torch.Tensor:
    """(adv_clip_max / beta) * mean_B(r L+ + (1 - r) L-) (see the module docstring); ``t`` and ``r`` are [B]."""
    t = t.view(-1, *[1] * (x0.ndim - 1))
    v_old = v_old.detach()
    positive = beta * v + (1 - beta) * v_old
    negative = (1 + beta) * v_old - beta * v
    loss_pos = adaptive_x0_loss(x_t - t * positive, x0)
    loss_neg = adaptive_x0_loss(x_t - t * negative, x0)
    return (adv_clip_max / beta) * (r * loss_pos + (1 - r) * loss_neg).mean()


def old_policy_decay(global_step: int, rate: float, maximum: float, flat_steps: int) -> float:
    """The reference's ``return_decay``: 0 before ``flat_steps``, then min(rate * (step - flat), max)."""
    if global_step < flat_steps:
        return 0.0
    return min((global_step - flat_steps) * rate, maximum)


@dataclass(frozen=True)
class NFTOptions:
    beta: float = option(1.0, f"Mixing strength beta of the implicit positive/negative policies ({SOURCE}: "
                              "config.beta, 1.0 in the SD3.5-M pickscore recipe, 0.1 in the OCR and multi-reward "
                              "ones).", exclusiveMinimum=0)
    kl_beta: float = option(1e-4, f"Weight of the velocity-space KL to the reference, the LoRA disabled ({SOURCE}: "
                                  "config.train.beta = 1e-4).", minimum=0)
    timestep_fraction: float = option(0.99, "Each sample trains at the first int(steps * fraction) of a seeded "
                                            f"permutation of its rollout's timestep grid ({SOURCE}: "
                                            "config.train.timestep_fraction = 0.99, i.e. all but one).",
                                      exclusiveMinimum=0, maximum=1)
    inner_epochs: int = option(1, f"Passes over the iteration's samples ({SOURCE}: num_inner_epochs = 1).",
                               minimum=1)
    old_decay_rate: float = option(0.001, "The old policy's soft update old <- d old + (1 - d) current after each "
                                          "iteration, d = min(rate * (global_step - flat), max) "
                                          f"({SOURCE}: return_decay, decay_type 1: rate 0.001).", minimum=0)
    old_decay_max: float = option(0.5, "Upper bound of d (decay_type 1: 0.5; the OCR recipe's type 2: 0.999).",
                                  minimum=0, maximum=1)
    old_decay_flat_steps: int = option(0, "Optimizer steps before d leaves 0, the old policy following the trained "
                                          "one exactly (decay_type 1: 0; type 2: 75).", minimum=0)


@objective("nft")
class NFT(Objective):
    Options = NFTOptions
    description = "DiffusionNFT on the rollouts' final latents (flow matching)."
    signal = "advantages"
    needs = frozenset({"flow_matching"})
    keeps_tied_groups = True  # the reference keeps groups of equal rewards, at r = 1/2
    rollout_adapter = "old"
    preflight_checks = ("rollout_guidance",)
    extra_adapters = ("old",)
    multi_process = True
    curves = ("train/loss", "train/policy_loss", "train/kl_loss", "train/old_deviate")
    moved_keys = {"nft_beta": "beta", "inner_epochs": "inner_epochs"}

    def load(self, inputs: TrainingInputs, model) -> CleanLatentData:
        self.num_train_timesteps = model.scheduler_config["num_train_timesteps"]
        return load_clean_latents(inputs, model.family)

    def trained_timesteps(self, data: CleanLatentData) -> int:
        return max(1, int(len(data.grid) * self.options.timestep_fraction))

    def plan(self, data: CleanLatentData, processes: int) -> list[list[tuple]]:
        """Updates of ``gradient_accumulation_steps`` batches x trained timesteps; a micro-batch is
        (sample indices, grid index of each sample, noise seed)."""
        size = self.train.batch_size * processes  # the global batch (each rank trains its share)
        batches = epoch_batches(len(data), size, self.options.inner_epochs, self.seed, self.iteration)
        per_epoch = -(-len(data) // size)
        timesteps = self.trained_timesteps(data)
        per_update = self.train.gradient_accumulation_steps
        orders = [self._grid_order(len(data), len(data.grid), epoch) for epoch in range(self.options.inner_epochs)]
        updates = []
        for u in range(0, len(batches), per_update):
            micros = []
            for b, index in enumerate(batches[u: u + per_update], start=u):
                order = orders[b // per_epoch]
                for j in range(timesteps):
                    micros.append((index, order[index, j], seeded(self.seed, self.iteration + 1, 11, b, j)))
            updates.append(micros)
        return updates

    def _grid_order(self, samples: int, grid: int, epoch: int) -> torch.Tensor:
        """[samples, grid]: each sample's seeded permutation of the grid indices in this inner epoch."""
        gen = torch.Generator().manual_seed(seeded(self.seed, self.iteration + 1, 13, epoch))
        return torch.stack([torch.randperm(grid, generator=gen) for _ in range(samples)])

    def _velocity(self, policy, module, data, x_t, t, cond) -> torch.Tensor:
        return conditional_velocity(policy, module, data, x_t, t, cond, self.num_train_timesteps)

    def loss(self, policy, data: CleanLatentData, micro):
        index, grid_index, noise_seed = micro
        device = policy.device
        x0, t = data.latents[index], data.grid[grid_index]
        x_t, _ = noised(x0, t, noise_seed)  # the global batch's noise, then this rank's rows
        part, share = rank_share(len(index), policy.process_index, policy.num_processes)
        index, x_t, x0, t = index[part], x_t[part].to(device), x0[part].to(device), t[part].to(device)
        cond = data.conditioning(index, device)
        with torch.no_grad(), policy.swapped_in("old"):
            v_old = self._velocity(policy, policy.model, data, x_t, t, cond)
        v = self._velocity(policy, policy.module, data, x_t, t, cond)
        clip = self.config["advantages"]["adv_clip_max"]
        r = optimality(data.advantages[index].to(device), clip)
        policy_loss = nft_policy_loss(v, v_old, x_t, x0, t, r, self.options.beta, clip)
        kl = torch.zeros((), device=device)
        if self.options.kl_beta > 0:
            with torch.no_grad(), policy.reference() as reference:
                v_ref = self._velocity(policy, reference, data, x_t, t, cond)
            kl = velocity_kl(v, v_ref)
        loss = policy_loss + self.options.kl_beta * kl
        return weighted(loss, {"train/loss": loss.item(), "train/policy_loss": policy_loss.item(),
                               "train/kl_loss": kl.item(), "train/old_deviate": ((v.detach() - v_old) ** 2).mean().item()},
                        share)

    def start(self, policy, data) -> None:
        if "old" not in policy.extra:  # iteration 0: the old policy starts as a copy of the trained adapter
            policy.extra["old"] = [p.detach().clone() for p in policy.trainable]

    def finish(self, policy, updates: int) -> None:
        """The iteration's soft update of the old policy (after all of its optimizer steps)."""
        global_step = (self.iteration + 1) * updates
        decay = old_policy_decay(global_step, self.options.old_decay_rate, self.options.old_decay_max,
                                 self.options.old_decay_flat_steps)
        with torch.no_grad():
            for old, current in zip(policy.extra["old"], policy.trainable):
                old.copy_(old * decay + current.detach() * (1.0 - decay))

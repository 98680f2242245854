"""Direct Group Preference Optimization (DGPO; Luo, Hu, Tang, 2025), as Luo-Yihong/DGPO's
``scripts/train_sd3_dgpo.py`` trains SD3.5-M (``config/dgpo.py``: ``geneval_sd3_4gpu``, ``general_ocr_sd3_4gpu``).

A DPO-style likelihood of group-level preferences. Rollouts are plain ODE samples of the current policy
(the reference's ``noise_level 0``: no log-probs are recorded); training re-noises each rollout's clean
latent x0 at a few timesteps of the rollout's own grid. Each inner epoch draws M = ``num_train_timesteps``
grid indices without replacement from the first ``trunc_steps + 1`` (the noisiest), shared by all of its
batches; a batch holds whole groups (a prompt's samples, as the reference's ``DistributedKRepeatSampler``
batches them), and with ``shared_noise`` every sample of a group is noised with the same eps at a timestep,
x_t = (1 - t) x0 + t eps. With the trained velocity v, the reference's v_ref (the LoRA disabled), the EMA
reference's v_old and the target eps - x0 (no CFG in any of them; means over latent dimensions):

    d = mean((v - target)^2), d_ref, d_old                          per sample
    clip (clip_dsm): ratio = exp(d_old - d); d is detached where A > 0 and ratio > 1 + c, or A <= 0 and ratio < 1 - c
    s_g = sum over the group g of A beta_dpo (sg(d) - d_ref) / |g|  (d_old in place of d_ref with use_ema_ref)
    loss = mean_B(sg(sigmoid(s_g)) A d) + kl_beta mean_B(mean((v - v_ref)^2))

with A the group advantages clipped to +-advantages.adv_clip_max (``compute_group_dgpo_loss_allreduce``). The
EMA reference is a copy of the LoRA weights, kept across iterations (``checkpoint/ema_ref/``), updated after
every optimizer step: ema <- d ema + (1 - d) current, d = min(0.3, 0.001 global_step) (global_step = optimizer
steps before this one); in-stage checkpoints save it, so a resumed train equals an uninterrupted one. An
optimizer step averages the gradients of ``gradient_accumulation_steps`` batches x the M timesteps (the
reference's accumulation of ``gradient_accumulation_steps x num_train_timesteps``).

Departures from the reference code, stated in docs/flow-rl.md: rollouts use the Euler ODE (its 2nd-order DPM
solver: the algorithm is solver-agnostic); after ``switch_ema_ref`` optimizer steps (200, 500) its rollouts
sample the EMA reference's weights: here they always sample the trained LoRA; its separate EMA of the LoRA for
evaluations and checkpoints (``train.ema``) is not kept, as for DiffusionNFT; ``kl_cfg`` (a CFG reference in the
KL, 1 in every recipe) is not offered. Over several processes a global batch of whole groups is split over the ranks
and the group sums s_g are all-reduced, as the reference's (``compute_group_dgpo_loss_allreduce``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rewardloop.lazy_torch import torch

from rewardloop.objectives.advantage_training import rank_share, summed_over_processes, weighted
from rewardloop.objectives.clean_latents import CleanLatentData, conditional_velocity, load_clean_latents, seeded
from rewardloop.objectives.options import option
from rewardloop.objectives.registry import Objective, ObjectiveError, TrainingInputs, objective

SOURCE = "Luo-Yihong/DGPO scripts/train_sd3_dgpo.py"
RECIPE = "Luo-Yihong/DGPO config/dgpo.py geneval_sd3_4gpu"


def per_sample_mse(velocity, target) -> torch.Tensor:
    """mean((velocity - target)^2) over each sample's latent dimensions."""
    return ((velocity - target) ** 2).mean(dim=tuple(range(1, velocity.ndim)))


def clipped_dsm(dsm, old_dsm, advantages, clip_range: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(dsm detached where the PPO-style clip holds, the clip mask): ratio = exp(old_dsm - dsm), clipped where
    A > 0 and ratio > 1 + c, or A <= 0 and ratio < 1 - c."""
    ratio = torch.exp(old_dsm - dsm)
    should_clip = torch.where(advantages > 0, ratio > 1.0 + clip_range, ratio < 1.0 - clip_range)
    return torch.where(should_clip, dsm.detach(), dsm), should_clip


def group_preference_loss(dsm, ref_dsm, advantages, groups, beta_dpo: float, sizes=None,
                          all_reduce=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean_B(sg(sigmoid(s_g)) A dsm), the samples' weights sigmoid(s_g)); s_g = sum over the group of
    A beta_dpo (sg(dsm) - ref_dsm) / |g|; ``groups``: each sample's group, 0..G-1.

    Over several processes each rank holds some rows of a group: ``sizes`` are the whole groups' sizes (of the
    global batch) and ``all_reduce`` sums the ranks' partial s_g in place, as the reference's
    ``compute_group_dgpo_loss_allreduce`` (s_g only enters detached, so nothing is back-propagated through it)."""
    sizes = (torch.bincount(groups) if sizes is None else sizes).to(dsm.dtype)
    per_sample = advantages * beta_dpo * (dsm.detach() - ref_dsm.detach()) / sizes[groups]
    sums = torch.zeros(len(sizes), dtype=dsm.dtype, device=dsm.device).scatter_add(0, groups, per_sample)
    if all_reduce is not None:
        all_reduce(sums)
    weights = torch.sigmoid(sums)[groups].detach()
    return (weights * advantages * dsm).mean(), weights


def ema_ref_decay(global_step: int, rate: float, maximum: float) -> float:
    """The reference's ``min(0.3, 0.001 * global_step)``."""
    return min(maximum, rate * global_step)


@dataclass
class GroupedLatentData(CleanLatentData):
    """Clean latents with each sample's group (its prompt), as indices 0..G-1."""

    group: torch.Tensor | None = None

    def group_members(self) -> list[torch.Tensor]:
        return [torch.nonzero(self.group == g).flatten() for g in range(int(self.group.max()) + 1)]


@dataclass(frozen=True)
class DGPOOptions:
    """Defaults: the reference's GenEval recipe (RECIPE) on SD3.5-M; its OCR recipe differs in global_std only."""

    beta_dpo: float = option(100.0, f"beta of the group preference (DPO's beta; {RECIPE}: 101; compressibility and "
                                    "OCR: 100).", exclusiveMinimum=0)
    num_train_timesteps: int = option(4, f"Timesteps M trained per inner epoch ({RECIPE}: num_train_timesteps 4).",
                                      minimum=1)
    trunc_steps: int = option(4, "The M timesteps are drawn from the grid's first trunc_steps + 1 (the noisiest; "
                                 f"{RECIPE}: 4 of 10 steps, 'equals t_min = shift(0.3)'; compressibility: 6).",
                              minimum=0)
    shared_noise: bool = option(True, "One noise per group and timestep, shared by the group's samples "
                                      f"({SOURCE}: use_shared_noise True).")
    clip_range: float = option(0.01, f"Range c of the PPO-style clip of exp(d_old - d) ({RECIPE}: 1e-2; "
                                     "compressibility: 5e-2).", exclusiveMinimum=0)
    clip_dsm: bool = option(True, f"Detach d where the clip holds ({RECIPE}: clip_dsm True).")
    clip_kl: bool = option(False, f"Detach the KL term where the clip holds ({RECIPE}: clip_kl False).")
    kl_beta: float = option(0.02, "Weight of the velocity-space KL to the reference, the LoRA disabled "
                                  f"({RECIPE}: train.beta 0.02; compressibility: 0).", minimum=0)
    use_ema_ref: bool = option(False, "The group preference compares with the EMA reference instead of the "
                                      f"LoRA-disabled one ({SOURCE}: use_ema_ref, False but in dgpo_wocfg_emaref).")
    ema_ref_decay_rate: float = option(0.001, "The EMA reference's decay d = min(max, rate x global_step) after each "
                                              f"optimizer step ({SOURCE}: 0.001).", minimum=0)
    ema_ref_decay_max: float = option(0.3, f"Upper bound of that decay ({SOURCE}: 0.3).", minimum=0, maximum=1)
    inner_epochs: int = option(1, f"Passes over the iteration's samples ({RECIPE}: num_inner_epochs 1).", minimum=1)


@objective("dgpo")
class DGPO(Objective):
    Options = DGPOOptions
    description = "Direct Group Preference Optimization on the rollouts' final latents (flow matching)."
    signal = "advantages"
    needs = frozenset({"flow_matching"})
    keeps_tied_groups = True  # the reference trains every sample (its filter of all-zero advantages is disabled)
    extra_adapters = ("ema_ref",)
    extra_adapters_per_step = True  # the EMA reference moves after every optimizer step
    multi_process = True
    # (no rollout_guidance check: the reference samples at CFG 4.5 and trains the unguided velocity)
    curves = ("train/loss", "train/policy_loss", "train/kl_loss", "train/dsm_loss")

    @classmethod
    def check(cls, config) -> None:
        options = {**vars(DGPOOptions()), **(config["train"].get("dgpo") or {})}
        trunc, steps = options["trunc_steps"], config["generate"]["steps"]
        if options["num_train_timesteps"] > trunc + 1:
            raise ObjectiveError(f"train.dgpo.num_train_timesteps: {options['num_train_timesteps']} timesteps cannot be "
                                 f"drawn without replacement from the first trunc_steps + 1 = {trunc + 1} of the grid")
        if trunc + 1 > steps:
            raise ObjectiveError(f"train.dgpo.trunc_steps: {trunc} + 1 timesteps of a rollout of generate.steps {steps}; "
                                 f"at most {steps - 1}")
        group, batch = config["generate"]["images_per_prompt"], config["train"]["batch_size"]
        processes = config["train"].get("num_processes") or 1
        if batch * processes < group:
            raise ObjectiveError(f"train.batch_size: {batch} x {processes} process(es) holds no whole group of "
                                 f"generate.images_per_prompt {group} samples (DGPO's preference is over a prompt's "
                                 "whole group)")

    @classmethod
    def smoke_overlay(cls, config) -> dict:
        """A batch of one whole group, and the timesteps within the shortened rollout."""
        options = {**vars(DGPOOptions()), **(config["train"].get("dgpo") or {})}
        trunc = min(options["trunc_steps"], config["generate"]["steps"] - 1)
        return {"train": {"batch_size": max(config["train"]["batch_size"], config["generate"]["images_per_prompt"]),
                          "dgpo": {"trunc_steps": trunc,
                                   "num_train_timesteps": min(options["num_train_timesteps"], trunc + 1)}}}

    def load(self, inputs: TrainingInputs, model) -> GroupedLatentData:
        self.num_train_timesteps = model.scheduler_config["num_train_timesteps"]
        data = load_clean_latents(inputs, model.family)
        _, group = np.unique(inputs.signal.prompt_id.to_numpy(), return_inverse=True)
        if self.options.trunc_steps + 1 > len(data.grid):
            raise ObjectiveError(f"train.dgpo.trunc_steps: {self.options.trunc_steps} + 1 timesteps, but the rollouts "
                                 f"took {len(data.grid)} steps ({inputs.latents_path}: rollout/sigmas)")
        return GroupedLatentData(**vars(data), group=torch.as_tensor(group, dtype=torch.long))

    def batches(self, data: GroupedLatentData, epoch: int, processes: int = 1) -> list[torch.Tensor]:
        """An inner epoch's global batches: a seeded order of the groups, packed whole into batches of at most
        train.batch_size x processes samples (each rank takes its share of every batch, rank_share)."""
        members = data.group_members()
        order = torch.randperm(len(members), generator=torch.Generator().manual_seed(
            seeded(self.seed, self.iteration + 1, 29, epoch)))
        capacity = self.train.batch_size * processes
        batches, current = [], []
        for g in order.tolist():
            if len(members[g]) > capacity:
                raise ObjectiveError(f"train.batch_size: {self.train.batch_size} x {processes} process(es) holds no "
                                     f"whole group of {len(members[g])} samples (generate.images_per_prompt): DGPO's "
                                     "preference is over a prompt's whole group")
            if sum(len(m) for m in current) + len(members[g]) > capacity:
                batches.append(torch.cat(current))
                current = []
            current.append(members[g])
        return batches + ([torch.cat(current)] if current else [])

    def plan(self, data: GroupedLatentData, processes: int) -> list[list[tuple]]:
        """Updates of ``gradient_accumulation_steps`` batches x the epoch's M timesteps; a micro-batch is
        (sample indices, grid index, noise seed)."""
        batches, timesteps = [], []
        for epoch in range(self.options.inner_epochs):
            drawn = torch.randperm(self.options.trunc_steps + 1, generator=torch.Generator().manual_seed(
                seeded(self.seed, self.iteration + 1, 23, epoch)))[: self.options.num_train_timesteps]
            for index in self.batches(data, epoch, processes):
                batches.append(index)
                timesteps.append(drawn.tolist())
        per_update = self.train.gradient_accumulation_steps
        updates = [[(batches[b], g, seeded(self.seed, self.iteration + 1, 31, b, j))
                    for b in range(u, min(u + per_update, len(batches))) for j, g in enumerate(timesteps[b])]
                   for u in range(0, len(batches), per_update)]
        self.updates_per_iteration = len(updates)
        return updates

    def noise(self, x0: torch.Tensor, groups: torch.Tensor, seed: int) -> torch.Tensor:
        """eps for the batch: one per group (shared_noise) or one per sample, drawn from ``seed`` on the CPU."""
        gen = torch.Generator().manual_seed(seed)
        if not self.options.shared_noise:
            return torch.randn(x0.shape, generator=gen)
        return torch.randn((int(groups.max()) + 1, *x0.shape[1:]), generator=gen)[groups]

    def _velocity(self, policy, module, data, x_t, t, cond) -> torch.Tensor:
        return conditional_velocity(policy, module, data, x_t, t, cond, self.num_train_timesteps)

    def loss(self, policy, data: GroupedLatentData, micro):
        index, grid_index, noise_seed = micro
        device, options = policy.device, self.options
        groups = torch.unique(data.group[index], return_inverse=True)[1]
        sizes = torch.bincount(groups).to(device)  # the whole groups of the global batch
        noise = self.noise(data.latents[index], groups, noise_seed)  # drawn for the global batch: the same on every rank
        part, share = rank_share(len(index), policy.process_index, policy.num_processes)
        index, groups, noise = index[part], groups[part], noise[part]
        x0 = data.latents[index]
        t = data.grid[grid_index].expand(len(index))
        tt = t.view(-1, *[1] * (x0.ndim - 1))
        x_t, target = ((1 - tt) * x0 + tt * noise).to(device), (noise - x0).to(device)
        t, groups, cond = t.to(device), groups.to(device), data.conditioning(index, device)
        with torch.no_grad():
            with policy.reference() as reference:
                v_ref = self._velocity(policy, reference, data, x_t, t, cond)
            v_old = None
            if options.clip_dsm or options.clip_kl or options.use_ema_ref:
                with policy.swapped_in("ema_ref"):
                    v_old = self._velocity(policy, policy.model, data, x_t, t, cond)
        v = self._velocity(policy, policy.module, data, x_t, t, cond)
        clip = self.config["advantages"]["adv_clip_max"]
        advantages = data.advantages[index].to(device).clamp(-clip, clip)
        dsm = per_sample_mse(v, target)
        should_clip = torch.zeros_like(dsm, dtype=torch.bool)
        if v_old is not None:
            old_dsm = per_sample_mse(v_old, target)
            clipped, should_clip = clipped_dsm(dsm, old_dsm, advantages, options.clip_range)
            if options.clip_dsm:
                dsm = clipped
        ref_dsm = per_sample_mse(v_old if options.use_ema_ref else v_ref, target)
        policy_loss, weights = group_preference_loss(dsm, ref_dsm, advantages, groups, options.beta_dpo, sizes,
                                                     all_reduce=summed_over_processes(policy))
        kl = torch.zeros((), device=device)
        if options.kl_beta > 0:
            kl_per_sample = per_sample_mse(v, v_ref)
            if options.clip_kl:
                kl_per_sample = torch.where(should_clip, kl_per_sample.detach(), kl_per_sample)
            kl = kl_per_sample.mean()
        loss = policy_loss + options.kl_beta * kl
        return weighted(loss, {"train/loss": loss.item(), "train/policy_loss": policy_loss.item(),
                               "train/kl_loss": kl.item(), "train/dsm_loss": dsm.detach().mean().item(),
                               "train/clipfrac": should_clip.float().mean().item(),
                               "train/group_weight": weights.mean().item()}, share)

    def start(self, policy, data) -> None:
        if "ema_ref" not in policy.extra:  # iteration 0: the EMA reference starts as a copy of the trained adapter
            policy.extra["ema_ref"] = [p.detach().clone() for p in policy.trainable]

    def after_update(self, policy, step: int) -> None:
        """The EMA reference's update after optimizer step ``step`` of this iteration."""
        global_step = self.iteration * self.updates_per_iteration + step
        decay = ema_ref_decay(global_step, self.options.ema_ref_decay_rate, self.options.ema_ref_decay_max)
        with torch.no_grad():
            for ema, current in zip(policy.extra["ema_ref"], policy.trainable):
                ema.add_((1.0 - decay) * (current.detach() - ema))

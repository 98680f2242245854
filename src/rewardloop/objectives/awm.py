"""Advantage Weighted Matching (AWM; Xue et al., 2025, arXiv 2509.25050), as X-GenGroup/Flow-Factory trains SD3.5-M.

The flow-matching (pretraining) loss on the rollouts' clean latents x0, weighted by the group
advantages. Rollouts are plain ODE samples of the current policy (solver-agnostic: no log-probs
are recorded). For each batch, ``num_train_timesteps`` timesteps are drawn from the rollout's own
grid (stratified over the part of the grid inside ``timestep_range``, one draw for the whole
batch, as Flow-Factory's ``TimeSampler.discrete``), each with fresh noise, x_t = (1 - t) x0 + t eps:

    l = mean((v_theta(x_t, t) - (eps - x0))^2)                 (per sample, in float64)
    log p = -w(l, t)      w: uniform l | t l | t^2 l | huber t (sqrt(l + e) - 1e-5) | ghuber t ((l + e)^p - e^p) / p
    ratio = exp(log p - log p_old)
    loss = mean_B(max(-A ratio, -A clip(ratio, 1 - c, 1 + c)))
           + kl_beta mean((v - v_ref)^2) + ema_kl_beta mean((v - v_ema)^2)

with A clipped to +-advantages.adv_clip_max, v_ref the reference (the LoRA disabled) and v_ema an
exponential moving average of the trained weights, kept across iterations (``checkpoint/ema/``)
and updated once per iteration after training, ema <- d ema + (1 - d) current, with d from
``ema_decay_schedule`` at the iteration's index (Flow-Factory steps its EMA once per epoch).

log p_old is the policy's own at the start of the batch (Flow-Factory precomputes it per batch).
Here an optimizer update never splits a batch (it accumulates whole batches x their timesteps), so
log p_old equals the detached log p: the ratio is 1 and its gradient is that of -A log p, as in
Flow-Factory whenever its accumulation covers a batch (its SD3.5 recipe: one step per epoch).

Departure, stated in docs/flow-rl.md: Flow-Factory also evaluates and checkpoints with the EMA
weights; here eval reads the trained LoRA (as for every objective) and the EMA serves the KL term.
"""

from __future__ import annotations

from dataclasses import dataclass

from rewardloop.lazy_torch import torch

from rewardloop.objectives.advantage_training import clipped_policy_loss, epoch_batches, rank_share, weighted
from rewardloop.objectives.clean_latents import (CleanLatentData, conditional_velocity, load_clean_latents, noised,
                                                 seeded, velocity_kl)
from rewardloop.objectives.options import option
from rewardloop.objectives.registry import Objective, ObjectiveError, TrainingInputs, objective

SOURCE = "X-GenGroup/Flow-Factory trainers/awm.py"
RECIPE = "Flow-Factory examples/awm/lora/sd3_5/default.yaml"
WEIGHTINGS = ("uniform", "t", "t**2", "huber", "ghuber")
EMA_SCHEDULES = ("constant", "linear", "power")


def matching_log_prob(velocity, target, t, weighting: str, ghuber_power: float) -> torch.Tensor:
    """Per-sample -w(mean((v - target)^2), t) in float64 (see the module docstring), returned in fp32."""
    error = ((velocity.double() - target.double()) ** 2).mean(dim=tuple(range(1, velocity.ndim)))
    t = t.double().view(-1)
    if weighting == "uniform":
        weighted = error
    elif weighting == "t":
        weighted = t * error
    elif weighting == "t**2":
        weighted = t**2 * error
    elif weighting == "huber":
        weighted = t * (torch.sqrt(error + 1e-10) - 1e-5)
    elif weighting == "ghuber":
        eps = torch.tensor(1e-10, dtype=torch.float64, device=error.device)
        weighted = t * ((error + eps) ** ghuber_power - eps**ghuber_power) / ghuber_power
    else:
        raise ObjectiveError(f"train.awm.weighting: unknown {weighting!r} (expected one of {', '.join(WEIGHTINGS)})")
    return (-weighted).float()


def stratified_grid_indices(grid: torch.Tensor, count: int, timestep_range: float, skip_first: bool,
                            seed: int) -> torch.Tensor:
    """``count`` indices of ``grid`` (descending sigmas), stratified over those with sigma >= 1 - timestep_range.

    Flow-Factory's ``TimeSampler.discrete``: the indices of the grid in range span [lo, hi] (lo + 1
    with ``skip_first``, its discrete_wo_init); boundaries = linspace(lo, hi, count + 1), one
    uniform draw in each stratum.
    """
    inside = torch.nonzero(grid >= (1.0 - timestep_range) - 1e-6).flatten()
    if len(inside) == 0:
        raise ObjectiveError(f"train.awm.timestep_range: {timestep_range} keeps none of the rollout's timesteps "
                             f"(sigmas {[round(float(s), 3) for s in grid]})")
    lo, hi = int(inside.min()) + int(skip_first), int(inside.max())
    if lo > hi:
        raise ObjectiveError(f"train.awm.skip_first: the timestep_range {timestep_range} keeps only the grid's first "
                             "timestep; widen it or set skip_first: false")
    bounds = torch.linspace(lo, hi, count + 1)
    lower, upper = bounds[:-1].long(), bounds[1:].long()
    draws = torch.rand(count, generator=torch.Generator().manual_seed(seed))
    return (lower + (draws * (upper - lower)).long()).clamp(0, len(grid) - 1)


def ema_decay(schedule: str, decay: float, step: int, warmup_steps: int, initial: float) -> float:
    """Flow-Factory's ``ema_utils`` schedules at ``step``: constant d; linear d0 + (d - d0) min(step / warmup, 1);
    power min(d, (1 + step) / (warmup + step))."""
    if schedule == "constant" or (schedule == "power" and warmup_steps == 0):
        return decay
    if schedule == "linear":
        return decay if step >= warmup_steps else initial + (decay - initial) * step / warmup_steps
    if schedule == "power":
        return min(decay, (1 + step) / (warmup_steps + step))
    raise ObjectiveError(f"train.awm.ema_decay_schedule: unknown {schedule!r} (expected {', '.join(EMA_SCHEDULES)})")


@dataclass(frozen=True)
class AWMOptions:
    """Defaults: Flow-Factory's published SD3.5-M recipe (RECIPE), which reproduces the paper's PickScore run."""

    weighting: str = option("ghuber", f"w(l, t) of the matching loss ({RECIPE}: awm_weighting ghuber; the class "
                                      "default is Uniform).", enum=list(WEIGHTINGS))
    ghuber_power: float = option(0.25, f"Power p of the ghuber weighting ({SOURCE}: ghuber_power = 0.25).",
                                 exclusiveMinimum=0)
    num_train_timesteps: int | None = option(None, "Timesteps trained per batch; null: int(steps x timestep_range) "
                                                   f"({SOURCE}; {RECIPE}: 6 of 14).", minimum=1)
    timestep_range: float = option(0.9, "Train only at grid sigmas >= 1 - timestep_range "
                                         f"({RECIPE}: timestep_range = 0.9).", exclusiveMinimum=0, maximum=1)
    skip_first: bool = option(True, "Never train at the grid's first timestep, the pure-noise one "
                                    f"({RECIPE}: time_sampling_strategy discrete_wo_init).")
    clip_range: float = option(1.0, f"PPO clip range of the ratio ({RECIPE}: clip_range = 1; inactive here, "
                                    "see the module docstring).", exclusiveMinimum=0)
    kl_beta: float = option(1e-4, "Weight of the velocity-space KL to the reference, the LoRA disabled "
                                  f"({RECIPE}: kl_beta = 1e-4; the class default is 0).", minimum=0)
    ema_kl_beta: float = option(1.0, "Weight of the velocity-space KL to the EMA of the trained weights "
                                     f"({SOURCE}: ema_kl_beta, default 0; {RECIPE}: 1; algorithms.md "
                                     "recommends 0.1 with ema_decay 0.9 against collapse).", minimum=0)
    ema_decay: float = option(0.3, f"Target decay d of the EMA ({RECIPE}: ema_decay = 0.3).", minimum=0, maximum=1)
    ema_decay_schedule: str = option("linear", f"How d grows with the iteration ({RECIPE}: linear).",
                                     enum=list(EMA_SCHEDULES))
    ema_warmup_steps: int = option(1000, "Iterations over which the linear (or power) schedule reaches d "
                                         f"({RECIPE}: warmup_steps = 1000 epochs, so d stays near 0: the EMA "
                                         "follows the last iteration's weights).", minimum=0)
    ema_initial_decay: float = option(0.0, "d at iteration 0 of the linear schedule (Flow-Factory: initial_decay 0).",
                                      minimum=0, maximum=1)
    inner_epochs: int = option(1, f"Passes over the iteration's samples ({SOURCE}: num_inner_epochs = 1).",
                               minimum=1)


@objective("awm")
class AWM(Objective):
    Options = AWMOptions
    description = "Advantage Weighted Matching on the rollouts' final latents (flow matching)."
    signal = "advantages"
    needs = frozenset({"flow_matching"})
    keeps_tied_groups = True  # Flow-Factory trains every sample (A = 0 ones carry only the KL terms)
    extra_adapters = ("ema",)
    multi_process = True
    preflight_checks = ("rollout_guidance",)
    curves = ("train/loss", "train/policy_loss", "train/kl_loss", "train/ema_kl_loss", "train/matching_loss")

    @classmethod
    def check(cls, config) -> None:
        options = config["train"].get("awm") or {}
        if (options.get("ema_decay_schedule") == "linear" and options.get("ema_warmup_steps", 1000) == 0):
            raise ObjectiveError("train.awm.ema_warmup_steps: the linear EMA schedule needs at least 1")

    def load(self, inputs: TrainingInputs, model) -> CleanLatentData:
        self.num_train_timesteps = model.scheduler_config["num_train_timesteps"]
        return load_clean_latents(inputs, model.family)

    def trained_timesteps(self, data: CleanLatentData) -> int:
        if self.options.num_train_timesteps is not None:
            return self.options.num_train_timesteps
        return max(1, int(len(data.grid) * self.options.timestep_range))

    def plan(self, data: CleanLatentData, processes: int) -> list[list[tuple]]:
        """Updates of ``gradient_accumulation_steps`` batches x trained timesteps; a micro-batch is
        (sample indices, grid index, noise seed), the grid index shared by the batch."""
        batches = epoch_batches(len(data), self.train.batch_size * processes, self.options.inner_epochs, self.seed,
                                self.iteration)  # global batches: each rank trains its share
        count = self.trained_timesteps(data)
        updates = []
        for u in range(0, len(batches), self.train.gradient_accumulation_steps):
            micros = []
            for b, index in enumerate(batches[u: u + self.train.gradient_accumulation_steps], start=u):
                grid_indices = stratified_grid_indices(data.grid, count, self.options.timestep_range,
                                                       self.options.skip_first,
                                                       seeded(self.seed, self.iteration + 1, 17, b))
                micros += [(index, int(g), seeded(self.seed, self.iteration + 1, 19, b, j))
                           for j, g in enumerate(grid_indices)]
            updates.append(micros)
        return updates

    def _velocity(self, policy, module, data, x_t, t, cond) -> torch.Tensor:
        return conditional_velocity(policy, module, data, x_t, t, cond, self.num_train_timesteps)

    def loss(self, policy, data: CleanLatentData, micro):
        index, grid_index, noise_seed = micro
        device = policy.device
        x0 = data.latents[index]
        t = data.grid[grid_index].expand(len(index))
        x_t, noise = noised(x0, t, noise_seed)  # the global batch's noise, then this rank's rows
        part, share = rank_share(len(index), policy.process_index, policy.num_processes)
        index = index[part]
        x_t, x0, noise, t = x_t[part].to(device), x0[part].to(device), noise[part].to(device), t[part].to(device)
        cond = data.conditioning(index, device)
        options = self.options
        v_ema = None
        if options.ema_kl_beta > 0:  # before the trained forward: swapping weights in place would break its graph
            with torch.no_grad(), policy.swapped_in("ema"):
                v_ema = self._velocity(policy, policy.model, data, x_t, t, cond)
        v = self._velocity(policy, policy.module, data, x_t, t, cond)
        log_prob = matching_log_prob(v, noise - x0, t, options.weighting, options.ghuber_power)
        clip = self.config["advantages"]["adv_clip_max"]
        advantages = data.advantages[index].to(device).clamp(-clip, clip)
        policy_loss, clipfrac, _ = clipped_policy_loss(log_prob, log_prob.detach(), advantages, options.clip_range)
        kl = ema_kl = torch.zeros((), device=device)
        if options.kl_beta > 0:
            with torch.no_grad(), policy.reference() as reference:
                v_ref = self._velocity(policy, reference, data, x_t, t, cond)
            kl = velocity_kl(v, v_ref)
        if v_ema is not None:
            ema_kl = velocity_kl(v, v_ema)
        loss = policy_loss + options.kl_beta * kl + options.ema_kl_beta * ema_kl
        return weighted(loss, {"train/loss": loss.item(), "train/policy_loss": policy_loss.item(),
                               "train/kl_loss": kl.item(), "train/ema_kl_loss": ema_kl.item(),
                               "train/clipfrac": clipfrac.item(),
                               "train/matching_loss": ((v.detach() - (noise - x0)) ** 2).mean().item()}, share)

    def start(self, policy, data) -> None:
        if "ema" not in policy.extra:  # iteration 0: the EMA starts as a copy of the trained adapter
            policy.extra["ema"] = [p.detach().clone() for p in policy.trainable]

    def finish(self, policy, updates: int) -> None:
        """The iteration's EMA update, after all of its optimizer steps (Flow-Factory: ``ema_step(epoch)``)."""
        o = self.options
        decay = ema_decay(o.ema_decay_schedule, o.ema_decay, self.iteration, o.ema_warmup_steps, o.ema_initial_decay)
        with torch.no_grad():
            for ema, current in zip(policy.extra["ema"], policy.trainable):
                ema.mul_(decay).add_(current.detach(), alpha=1.0 - decay)

"""Flow-GRPO (Liu et al., 2025) on recorded SDE rollouts (flow matching); on a UNet DDIM steps with eta > 0 (DDPO).

For each recorded step of each sample, the transition ``x_t -> x_next`` stored by the generate stage
is re-scored under the current policy (the denoiser with its LoRA, CFG as in the rollout), in
fp32, and optimised with PPO's clipped surrogate on the group advantages, plus a KL penalty to the
reference (the same denoiser with the LoRA disabled), as flow_grpo's ``train_sd3.py``:

    ratio = exp(logp - logp_old)
    policy_loss = mean(max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)))
    kl_loss = mean(|mu_theta - mu_ref|^2) / (2 std_t^2)          (per sample, then averaged)
    loss = policy_loss + kl_beta * kl_loss

With ``guard`` (GRPO-Guard, Wang et al. 2025, arXiv 2510.22319, as Flow-Factory's ``GRPOGuardTrainer``)
the ratio is normalised and reweighted per step, s = std_t sqrt(-dt) the transition's std and
mu_old the rollout's recorded mean:

    ratio = exp((logp - logp_old) s + mean((mu_theta - mu_old)^2) / (2 s))

which equals exp(mean(eps (mu_theta - mu_old))) with eps the rollout's noise: centred at 1 under
the old policy (Flow-GRPO's ratio is biased below 1) and of a comparable spread at every step.

An optimizer step accumulates the gradients of ``gradient_accumulation_steps`` batches times every
recorded step (as Flow-GRPO does); ``inner_epochs`` passes over the samples. The order of
micro-batches is a pure function of (seed, iteration), so a resumed run repeats the uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass

from rewardloop.lazy_torch import torch

from rewardloop.models.families import ModelFamily
from rewardloop.objectives.advantage_training import (clipped_policy_loss, epoch_batches, load_advantages, rank_share,
                                                      weighted)
from rewardloop.objectives.options import option
from rewardloop.objectives.registry import Objective, ObjectiveError, TrainingInputs, objective
from rewardloop.sampling.recorded_steps import DDIMSteps, FlowSteps, recorded_steps


def guard_ratio(log_prob, old_log_prob, mean, old_mean, scale) -> torch.Tensor:
    """GRPO-Guard's ratio exp((logp - logp_old) s + mean((mu - mu_old)^2) / (2 s)), s the transition std [B]."""
    scale = torch.as_tensor(scale, dtype=torch.float32, device=mean.device).reshape(-1)
    squared = ((mean.float() - old_mean.float()) ** 2).mean(dim=tuple(range(1, mean.ndim)))
    return torch.exp((log_prob - old_log_prob) * scale + squared / (2 * scale))


def kl_to_reference(mean: torch.Tensor, mean_ref: torch.Tensor, std) -> torch.Tensor:
    """Per-sample KL of two Gaussians of equal std_t: mean over latent dims of |mu - mu_ref|^2 / (2 std_t^2)."""
    std = torch.as_tensor(std, dtype=torch.float32, device=mean.device).reshape(-1)
    squared = ((mean.float() - mean_ref.float()) ** 2).mean(dim=tuple(range(1, mean.ndim)))
    return squared / (2 * std**2)


@dataclass
class RolloutData:
    """Recorded SDE steps of the kept samples: [N, K, ...] tensors, K = recorded steps per sample.

    ``params``: the per-step constants of the recorded step kind (``steps``; flow: sigmas, sigmas_next,
    std; DDIM: timesteps, alphas, alphas_prev, std), each [N, K]. ``cond``: the family's conditioning
    rows of the samples' prompts {key: [N, ...]}; ``uncond``: what the rollout guided against
    (``family.unconditional``) {key: [1, ...]} for CFG.
    """

    family: ModelFamily
    latents: torch.Tensor
    next_latents: torch.Tensor
    log_probs: torch.Tensor
    params: dict
    advantages: torch.Tensor
    cond: dict
    uncond: dict
    guidance_scale: float
    steps: FlowSteps | DDIMSteps | None = None  # the step kind the rollouts recorded
    means: torch.Tensor | None = None  # the rollout's transition means (flow; GRPO-Guard's mu_old)
    pixel_size: int | None = None  # the rollouts' image size (for denoisers conditioned on it)

    def __len__(self) -> int:
        return len(self.latents)

    @property
    def recorded_steps(self) -> int:
        return self.latents.shape[1]


def load_rollouts(inputs: TrainingInputs, family: ModelFamily, vae_scale_factor: int = 8) -> RolloutData:
    table = load_advantages(inputs)

    def get(key: str) -> torch.Tensor:
        if key not in inputs.tensors:
            raise ObjectiveError(f"{inputs.latents_path}: has no tensor {key!r} (needed by {inputs.signal_path}; "
                                 f"was it generated with train.loss: grpo on a {family.name} model?)")
        return inputs.tensors[key]

    def stack(name: str) -> torch.Tensor:
        return torch.stack([get(f"trajectory/{sid}/{name}") for sid in table.sample_id])

    # Files written before CPS existed hold no step type: they are Flow-GRPO SDE steps.
    steps = recorded_steps(family.flow_matching, int(inputs.tensors.get("rollout/sde_type", 0)))
    latents = stack("latents")
    recorded_means = f"trajectory/{table.sample_id.iloc[0]}/means" in inputs.tensors
    return RolloutData(
        family=family, latents=latents, next_latents=stack("next_latents"), log_probs=stack("log_probs"),
        means=stack("means") if isinstance(steps, FlowSteps) and recorded_means else None,
        params={name: stack(name) for name in steps.params},
        advantages=torch.tensor(table.advantage.to_numpy(), dtype=torch.float32),
        cond={key: torch.stack([get(f"{key}/{p}") for p in table.prompt_id]) for key in family.conditioning},
        uncond={key: get(f"{family.unconditional_key}/{key}")[None] for key in family.conditioning},
        guidance_scale=float(get("rollout/guidance_scale")),
        steps=steps,
        pixel_size=latents.shape[-1] * vae_scale_factor,
    )


def _may_record_last_step(sde, steps: int, selected: list[int]) -> bool:
    """Whether the step strategy can pick the rollout's last step (for sde_window: its window_range's end)."""
    if sde["strategy"] == "sde_window":
        return (sde.get("window_range") or (0, steps))[1] >= steps
    if sde["strategy"] == "epoch_global_random_choice":
        return max(sde.get("candidate_steps") or range(steps)) >= steps - 1
    return steps - 1 in selected


@dataclass(frozen=True)
class GRPOOptions:
    clip_range: float = option(1e-4, "PPO clip range of the ratio exp(logp - logp_old) (flow_grpo config "
                                     "train.clip_range; its SD3.5 recipes use 1e-4).", exclusiveMinimum=0)
    kl_beta: float = option(0.04, "Weight of the KL to the reference, the denoiser with the LoRA disabled "
                                  "(flow_grpo train.beta: 0.04 in its SD3.5 recipes).", minimum=0)
    inner_epochs: int = option(1, "Passes over the iteration's samples (flow_grpo train.num_inner_epochs); an "
                                  "optimizer step accumulates gradient_accumulation_steps batches x recorded steps.",
                               minimum=1)
    guard: bool = option(False, "GRPO-Guard (Wang et al. 2025, arXiv 2510.22319; Flow-Factory's grpo-guard "
                                "trainer): the ratio normalised by the rollout's step mean and reweighted by the "
                                "transition std per step, against Flow-GRPO's negatively biased ratio "
                                "(flow_grpo SDE steps on a flow-matching family only).")
    debug_alignment: bool = option(False, "Skip the optimizer step, so train/log_prob_mean_abs_diff measures the "
                                          "pure rollout-vs-train numerical drift of the log-probs (the LoRA stays "
                                          "as it was).")


@objective("grpo")
class GRPO(Objective):
    Options = GRPOOptions
    description = "Flow-GRPO on the recorded SDE steps (flow matching); DDPO-style DDIM steps on a UNet."
    signal = "advantages"
    records_steps = True
    multi_process = True
    preflight_checks = ("importance_ratio", "noise_level_0")
    needs = frozenset({"recorded_steps"})
    curves = ("train/loss", "train/kl_loss", "train/clipfrac", "train/approx_kl", "train/log_prob_mean_abs_diff")
    moved_keys = {"clip_range": "clip_range", "kl_beta": "kl_beta", "inner_epochs": "inner_epochs",
                  "debug_alignment": "debug_alignment"}

    @classmethod
    def check(cls, config) -> None:
        from rewardloop.sampling.step_strategies import StepStrategyError, select_sde_steps

        from rewardloop.models.families import family_names, get_family

        sde, steps = config["generate"]["sde"], config["generate"]["steps"]
        cps = sde.get("type", "flow_grpo") == "cps"
        family = config["model"]["family"]
        flow = get_family(family).flow_matching
        flows = ", ".join(family_names(flow_matching=True))
        if not flow and sde["noise_level"] > 1:
            raise ObjectiveError(f"generate.sde.noise_level: on {family} it is DDIM's eta of the recorded steps; "
                                 "must be <= 1")
        if (config.get("train", {}).get("grpo") or {}).get("guard") and (not flow or cps):
            raise ObjectiveError("train.grpo.guard: GRPO-Guard normalises Flow-GRPO's Gaussian SDE steps; it needs "
                                 f"a flow-matching model.family ({flows}) and generate.sde.type flow_grpo")
        if cps:
            if not flow:
                raise ObjectiveError(f"generate.sde.type: cps is a flow-matching step ({flows}); {family} records "
                                     "DDIM steps")
            if sde["noise_level"] > 1:
                raise ObjectiveError("generate.sde.noise_level: with type cps it is a in sin(a pi / 2); must be <= 1")
        after = sde.get("ode_after_window", "euler")
        if after != "euler" and sde["strategy"] != "mixgrpo_window":
            raise ObjectiveError(f"generate.sde.ode_after_window: {after} is MixGRPO-Flash's ODE after its sliding "
                                 f"window, whose steps every sample shares; set generate.sde.strategy: mixgrpo_window "
                                 f"(not {sde['strategy']}) or ode_after_window: euler")
        if "compress_ratio" in sde and after != "dpmsolver++":
            raise ObjectiveError("generate.sde.compress_ratio: it compresses the grid after the window for "
                                 "ode_after_window dpmsolver++ (MixGRPO-Flash); with euler it would do nothing")
        try:
            selectable = select_sde_steps(sde, steps, [0], 0)[0]
            if cps and _may_record_last_step(sde, steps, selectable):
                raise ObjectiveError(f"generate.sde: a CPS step into sigma 0 (step {steps - 1}, the last) has no noise "
                                     f"and no log-prob; end window_range at {steps - 1} or earlier (or keep candidate_steps "
                                     f"below {steps - 1})")
        except StepStrategyError as exc:
            raise ObjectiveError(str(exc)) from exc

    def load(self, inputs: TrainingInputs, model) -> RolloutData:
        self.num_train_timesteps = model.scheduler_config["num_train_timesteps"]
        return load_rollouts(inputs, model.family, model.vae_scale_factor)

    def plan(self, data: RolloutData, processes: int) -> list[list[tuple]]:
        batches = epoch_batches(len(data), self.train.batch_size * processes, self.options.inner_epochs, self.seed,
                                self.iteration)
        per_update = self.train.gradient_accumulation_steps
        return [[(index, k) for index in batches[u: u + per_update] for k in range(data.recorded_steps)]
                for u in range(0, len(batches), per_update)]

    @property
    def steps_optimizer(self) -> bool:
        return not self.options.debug_alignment

    def _step_mean(self, denoiser, data: RolloutData, index, k: int, device, dtype=None):
        """Mean of the recorded transition under ``denoiser`` (guidance as in the rollout), fp32."""
        lat = data.latents[index, k].to(device)
        p = {name: value[index, k].to(device) for name, value in data.params.items()}
        cond = {key: value[index].to(device) for key, value in data.cond.items()}
        uncond = {key: value.to(device) for key, value in data.uncond.items()} if data.family.uses_cfg else None
        prediction = data.family.predict(denoiser, lat, data.steps.timestep(p, self.num_train_timesteps), cond,
                                         guidance_scale=data.guidance_scale, uncond=uncond, dtype=dtype,
                                         pixel_size=data.pixel_size)
        return data.steps.mean(prediction, lat, p)

    def _log_prob(self, data: RolloutData, index, k: int, mean, device) -> torch.Tensor:
        p = {name: value[index, k].to(device) for name, value in data.params.items()}
        return data.steps.log_prob(data.next_latents[index, k].to(device), mean, p)

    def loss(self, policy, data: RolloutData, micro):
        index, k = micro
        part, share = rank_share(len(index), policy.process_index, policy.num_processes)
        index = index[part]
        device = policy.device
        mean = self._step_mean(policy.module, data, index, k, device, dtype=policy.model.dtype)
        mean_ref = None
        if self.options.kl_beta > 0:
            with torch.no_grad(), policy.reference() as reference:
                mean_ref = self._step_mean(reference, data, index, k, device)
        log_prob = self._log_prob(data, index, k, mean, device)
        std = data.params["std"][index, k].to(device)  # KL scale: flow std_t, DDIM's transition std
        old = data.log_probs[index, k].to(device)
        ratio = None
        if self.options.guard:
            if data.means is None:
                raise ObjectiveError("train.grpo.guard: the rollouts hold no trajectory/<id>/means (generated before "
                                     "GRPO-Guard existed?); rerun generate")
            scale = data.steps.transition_std({name: value[index, k] for name, value in data.params.items()}).to(device)
            ratio = guard_ratio(log_prob, old, mean, data.means[index, k].to(device), scale)
        policy_loss, clipfrac, approx_kl = clipped_policy_loss(log_prob, old, data.advantages[index].to(device),
                                                               self.options.clip_range, ratio)
        kl = kl_to_reference(mean, mean_ref, std).mean() if mean_ref is not None else torch.zeros((), device=device)
        loss = policy_loss + self.options.kl_beta * kl
        return weighted(loss, {
            "train/loss": loss.item(), "train/policy_loss": policy_loss.item(), "train/kl_loss": kl.item(),
            "train/clipfrac": clipfrac.item(), "train/approx_kl": approx_kl.item(),
            "train/log_prob_mean_abs_diff": (log_prob - old).abs().mean().item(),
            "train/ratio_mean": (torch.exp(log_prob - old) if ratio is None else ratio).mean().item(),
        }, share)

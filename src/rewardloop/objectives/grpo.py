"""Flow-GRPO training of a LoRA on recorded SDE rollouts (SD3; SD1.5 via DDIM with eta > 0, DDPO-style).

For each recorded step of each sample, the transition ``x_t -> x_next`` stored by the generate stage
is re-scored under the current policy (the transformer with its LoRA, CFG as in the rollout), in
fp32, and optimised with PPO's clipped surrogate on the group advantages, plus a KL penalty to the
reference (the same transformer with the LoRA disabled):

    ratio = exp(logp - logp_old)
    policy_loss = mean(max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)))
    kl_loss = mean(|mu_theta - mu_ref|^2) / (2 std_t^2)          (per sample, then averaged)
    loss = policy_loss + kl_beta * kl_loss

An optimizer step accumulates the gradients of ``gradient_accumulation_steps`` batches times every
recorded step (as Flow-GRPO does); ``inner_epochs`` passes over the samples. The order of
micro-batches is a pure function of (seed, iteration), so a resumed run repeats the uninterrupted one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import torch
from tqdm.auto import tqdm

from rewardloop.artifacts import read_table, read_tensors
from rewardloop.models.families import get_family
from rewardloop.sampling.flow import Conditioning, guided_velocity
from rewardloop.sampling.sde import gaussian_log_prob, step_mean, transition_log_prob
from rewardloop.training.state import load_state
from rewardloop.training.trainer import PreferenceTrainer, TrainingError


def clipped_policy_loss(log_prob, old_log_prob, advantages, clip_range: float):
    """PPO's clipped surrogate; returns (loss, clipfrac, approx_kl = 0.5 * mean((logp - logp_old)^2))."""
    ratio = torch.exp(log_prob - old_log_prob)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = torch.maximum(unclipped, clipped).mean()
    clipfrac = ((ratio - 1.0).abs() > clip_range).float().mean()
    approx_kl = 0.5 * ((log_prob - old_log_prob) ** 2).mean()
    return loss, clipfrac.detach(), approx_kl.detach()


def kl_to_reference(mean: torch.Tensor, mean_ref: torch.Tensor, std) -> torch.Tensor:
    """Per-sample KL of two Gaussians of equal std_t: mean over latent dims of |mu - mu_ref|^2 / (2 std_t^2)."""
    std = torch.as_tensor(std, dtype=torch.float32, device=mean.device).reshape(-1)
    squared = ((mean.float() - mean_ref.float()) ** 2).mean(dim=tuple(range(1, mean.ndim)))
    return squared / (2 * std**2)


@dataclass
class RolloutData:
    """Recorded SDE steps of the kept samples: [N, K, ...] tensors, K = recorded steps per sample.

    ``params``: the per-step constants of the family's step (sd3: sigmas, sigmas_next, std;
    sd15: timesteps, alphas, alphas_prev, std), each [N, K]. ``pooled`` is None for sd15.
    """

    family: str
    latents: torch.Tensor
    next_latents: torch.Tensor
    log_probs: torch.Tensor
    params: dict
    advantages: torch.Tensor
    embeds: torch.Tensor
    pooled: torch.Tensor | None
    guidance_scale: float

    def __len__(self) -> int:
        return len(self.latents)

    @property
    def recorded_steps(self) -> int:
        return self.latents.shape[1]


FLOW_STEP_PARAMS = ("sigmas", "sigmas_next", "std")
DDIM_STEP_PARAMS = ("timesteps", "alphas", "alphas_prev", "std")


def load_rollout_data(advantages_path, latents_path, family: str) -> RolloutData:
    table = read_table(advantages_path, required=["sample_id", "prompt_id", "advantage"]).to_pandas()
    if table.empty:
        raise TrainingError(f"{advantages_path}: no samples with a non-zero advantage (every group tied?)")
    tensors = read_tensors(latents_path)
    flow = get_family(family).flow

    def get(key: str) -> torch.Tensor:
        if key not in tensors:
            raise TrainingError(f"{latents_path}: has no tensor {key!r} (needed by {advantages_path}; "
                                f"was it generated with train.loss: grpo on a {family} model?)")
        return tensors[key]

    def stack(name: str) -> torch.Tensor:
        return torch.stack([get(f"trajectory/{sid}/{name}") for sid in table.sample_id])

    return RolloutData(
        family=family, latents=stack("latents"), next_latents=stack("next_latents"), log_probs=stack("log_probs"),
        params={name: stack(name) for name in (FLOW_STEP_PARAMS if flow else DDIM_STEP_PARAMS)},
        advantages=torch.tensor(table.advantage.to_numpy(), dtype=torch.float32),
        embeds=torch.stack([get(f"prompt_embeds/{p}") for p in table.prompt_id]),
        pooled=torch.stack([get(f"pooled_embeds/{p}") for p in table.prompt_id]) if flow else None,
        guidance_scale=float(get("rollout/guidance_scale")),
    )


def micro_batches(data_len: int, recorded_steps: int, cfg: Mapping, seed: int, iteration: int) -> list[list[tuple]]:
    """The run's optimizer updates, each a list of (sample indices, recorded step) micro-batches."""
    batches = []
    for epoch in range(cfg["inner_epochs"]):
        state = np.random.SeedSequence([seed, iteration + 1, 7, epoch]).generate_state(1)[0]
        order = torch.randperm(data_len, generator=torch.Generator().manual_seed(int(state)))
        batches += [order[i: i + cfg["batch_size"]] for i in range(0, data_len, cfg["batch_size"])]
    per_update = cfg["gradient_accumulation_steps"]
    return [[(index, k) for index in batches[u: u + per_update] for k in range(recorded_steps)]
            for u in range(0, len(batches), per_update)]


class GRPOTrainer(PreferenceTrainer):
    """Policy = denoiser (transformer or UNet) + LoRA; reference = the same denoiser with the LoRA disabled."""

    def __init__(self, train_cfg: Mapping, transformer, uncond: tuple[torch.Tensor, torch.Tensor],
                 num_train_timesteps: int, data: RolloutData, seed: int, iteration: int):
        self.updates = micro_batches(len(data), data.recorded_steps, train_cfg, seed, iteration)
        super().__init__({**train_cfg, "steps": len(self.updates)}, transformer, None, None, seed, iteration,
                         family=data.family)
        self.uncond = uncond
        self.num_train_timesteps = num_train_timesteps

    def after_init_lora(self) -> None:
        """Called once model(it-1)'s LoRA is loaded (NFT snapshots its "old" policy here)."""

    def on_resume(self) -> None:
        """Called when run() resumes from a checkpoint (NFT restarts its "old" policy there)."""

    def after_update(self) -> None:
        """Called after each optimizer step (NFT moves its EMA "old" policy here)."""

    def micro_loss(self, data, step: int, micro: int, index, k: int) -> tuple[torch.Tensor, dict]:
        """Loss and logs of micro-batch ``micro`` (samples ``index``, recorded step ``k``) of update ``step``."""
        return self.grpo_loss(data, index, k)

    def _step_mean(self, denoiser, data: RolloutData, index, k: int):
        """Mean of the recorded transition under ``denoiser`` (CFG as in the rollout), fp32."""
        device = self.accelerator.device
        lat = data.latents[index, k].to(device)
        p = {name: value[index, k].to(device) for name, value in data.params.items()}
        n = len(index)
        if get_family(data.family).flow:
            cond = Conditioning(data.embeds[index].to(device), data.pooled[index].to(device),
                                self.uncond[0].expand(n, -1, -1).to(device), self.uncond[1].expand(n, -1).to(device))
            velocity = guided_velocity(denoiser, lat, p["sigmas"], cond, data.guidance_scale, self.num_train_timesteps)
            return step_mean(velocity, lat, p["sigmas"], p["sigmas_next"], p["std"])
        from rewardloop.sampling.ddim_logprob import ddim_mean, guided_eps

        eps = guided_eps(denoiser, lat, p["timesteps"], data.embeds[index].to(device),
                         self.uncond[0].expand(n, -1, -1).to(device), data.guidance_scale)
        return ddim_mean(eps, lat, p["alphas"], p["alphas_prev"], p["std"])

    def _log_prob(self, data: RolloutData, index, k: int, mean) -> torch.Tensor:
        device = self.accelerator.device
        p = {name: value[index, k].to(device) for name, value in data.params.items()}
        next_latents = data.next_latents[index, k].to(device)
        if get_family(data.family).flow:
            return transition_log_prob(next_latents, mean, p["sigmas"], p["sigmas_next"], p["std"])
        return gaussian_log_prob(next_latents, mean, p["std"])

    def _means(self, data: RolloutData, index, k: int):
        mean = self._step_mean(self.unet, data, index, k)
        mean_ref = None
        if self.cfg["kl_beta"] > 0:
            with torch.no_grad():
                self.unet.disable_adapters()
                try:
                    mean_ref = self._step_mean(self.unet, data, index, k)
                finally:
                    self.unet.enable_adapters()
        return mean, mean_ref

    def grpo_loss(self, data: RolloutData, index, k: int) -> tuple[torch.Tensor, dict]:
        device = self.accelerator.device
        mean, mean_ref = self._means(data, index, k)
        log_prob = self._log_prob(data, index, k, mean)
        std = data.params["std"][index, k].to(device)  # KL scale: flow std_t, DDIM's transition std
        old = data.log_probs[index, k].to(device)
        policy, clipfrac, approx_kl = clipped_policy_loss(log_prob, old, data.advantages[index].to(device),
                                                          self.cfg["clip_range"])
        kl = kl_to_reference(mean, mean_ref, std).mean() if mean_ref is not None else torch.zeros((), device=device)
        loss = policy + self.cfg["kl_beta"] * kl
        return loss, {
            "train/loss": loss.item(), "train/policy_loss": policy.item(), "train/kl_loss": kl.item(),
            "train/clipfrac": clipfrac.item(), "train/approx_kl": approx_kl.item(),
            "train/log_prob_mean_abs_diff": (log_prob - old).abs().mean().item(),
            "train/ratio_mean": torch.exp(log_prob - old).mean().item(),
        }

    def run(self, data: RolloutData, state_dir, fingerprint: str, progress: bool = True) -> tuple[list[dict], int]:
        """All optimizer updates of the iteration, resuming from ``state_dir``; (history, resumed-from step)."""
        transformer, optimizer, lr_scheduler = self.accelerator.prepare(self.unet, self.optimizer, self.lr_scheduler)
        start, history = load_state(state_dir, fingerprint, self.named_trainable(), self.optimizer, self.lr_scheduler)
        if start:
            self.on_resume()
        transformer.train()
        for step in tqdm(range(start, len(self.updates)), desc="train", unit="step", disable=not progress):
            started = time.perf_counter()
            micro = self.updates[step]
            logs: dict[str, float] = {}
            optimizer.zero_grad()
            for m, (index, k) in enumerate(micro):
                loss, micro_logs = self.micro_loss(data, step, m, index, k)
                if not torch.isfinite(loss):
                    raise TrainingError(f"iteration {self.iteration}, step {step}: loss is {loss.item()}; "
                                        f"the last good state in {state_dir} is kept")
                self.accelerator.backward(loss / len(micro))
                for key, value in micro_logs.items():
                    logs[key] = logs.get(key, 0.0) + value / len(micro)
            if not self.cfg["debug_alignment"]:  # debug: measure rollout-vs-train drift only
                self.accelerator.clip_grad_norm_(self.params, self.cfg["max_grad_norm"])
                optimizer.step()
                lr_scheduler.step()
                self.after_update()
            logs.update({"step": step, "lr": lr_scheduler.get_last_lr()[0], "time": time.perf_counter() - started})
            history.append(logs)
            done = step + 1
            if done % self.cfg["checkpointing_steps"] == 0 and done < len(self.updates):
                self.checkpoint(state_dir, done, fingerprint, history)
        self.require_finite_weights(len(self.updates), state_dir)
        transformer.eval()
        return history, start


GRPO_CURVES = ("train/loss", "train/kl_loss", "train/clipfrac", "train/approx_kl", "train/log_prob_mean_abs_diff")


def summarize_grpo(history: list[dict], resumed_from: int) -> dict:
    """Means over the run and over its last quarter of the GRPO curves, for metrics.json."""
    summary = {"resumed_from_step": resumed_from, "steps": len(history)}
    if history:
        quarter = max(1, math.ceil(len(history) / 4))
        for key in GRPO_CURVES:
            summary[key] = float(np.mean([h[key] for h in history]))
            summary[f"{key}/last_quarter"] = float(np.mean([h[key] for h in history[-quarter:]]))
    return summary

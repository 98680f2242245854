"""Preference training of a LoRA on cached latents and text embeddings (Diffusion-DPO, SFT).

The generate stage stored every sample's final latents and every prompt's text embedding, so a
training step never runs the VAE encoder or the text encoder. Each step's batch, noise and
timesteps are a pure function of (seed, iteration, step), so resuming from an in-stage checkpoint
reproduces the uninterrupted run exactly.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import torch
from tqdm.auto import tqdm

from rewardloop.objectives import losses
from rewardloop.artifacts import read_table, read_tensors
from rewardloop.training.state import load_state, save_state


class TrainingError(RuntimeError):
    pass


@dataclass
class PairData:
    """Pairs as tensors: chosen/rejected latents [P, C, h, w] and their prompt embeddings [P, L, D].

    ``pooled``: SDXL's pooled embeddings [P, D2]; ``empty``: the empty prompt's conditioning
    (``train.proportion_empty_prompts``); the last ``offline`` pairs come from ``data.offline_pairs``.
    """

    chosen: torch.Tensor
    rejected: torch.Tensor
    embeds: torch.Tensor
    pooled: torch.Tensor | None = None
    empty: dict[str, torch.Tensor] | None = None
    offline: int = 0
    offline_fraction: float = 0.0  # share of each micro-batch drawn from the offline pairs

    def __len__(self) -> int:
        return len(self.chosen)

    @property
    def online(self) -> int:
        return len(self) - self.offline

    def conditioning(self, index: torch.Tensor, empty_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The conditioning rows of ``index``, with the empty prompt's where ``empty_mask`` is set."""
        cond = {"prompt_embeds": self.embeds[index]}
        if self.pooled is not None:
            cond["pooled_embeds"] = self.pooled[index]
        if empty_mask is not None and bool(empty_mask.any()):
            if self.empty is None:
                raise TrainingError("train.proportion_empty_prompts > 0 but the empty prompt's conditioning is not cached")
            for key, value in cond.items():
                cond[key] = torch.where(empty_mask.view(-1, *[1] * (value.ndim - 1)), self.empty[key], value)
        return cond


def concat_pairs(online: PairData, offline: PairData, offline_fraction: float) -> PairData:
    """Online pairs followed by offline ones (conditioning of the same family and size)."""
    if online.chosen.shape[1:] != offline.chosen.shape[1:]:
        raise TrainingError(
            f"data.offline_pairs: latents {tuple(offline.chosen.shape[1:])} differ from the rollouts' "
            f"{tuple(online.chosen.shape[1:])}"
        )
    pooled = None if online.pooled is None else torch.cat([online.pooled, offline.pooled])
    return PairData(
        chosen=torch.cat([online.chosen, offline.chosen]),
        rejected=torch.cat([online.rejected, offline.rejected]),
        embeds=torch.cat([online.embeds, offline.embeds]),
        pooled=pooled,
        empty=online.empty,
        offline=len(offline),
        offline_fraction=offline_fraction,
    )


def load_pair_data(pairs_path, latents_path) -> PairData:
    from rewardloop.models.families import EMPTY_PROMPT

    pairs = read_table(pairs_path, required=["prompt_id", "chosen", "rejected"]).to_pandas()
    if pairs.empty:
        raise TrainingError(f"{pairs_path}: no preference pairs (all groups tied?)")
    tensors = read_tensors(latents_path)

    def get(key: str) -> torch.Tensor:
        if key not in tensors:
            raise TrainingError(f"{latents_path}: has no tensor {key!r} (needed by {pairs_path})")
        return tensors[key]

    has_pooled = any(k.startswith("pooled_embeds/") for k in tensors)
    empty = {k.split("/", 1)[1]: v for k, v in tensors.items() if k.startswith(f"{EMPTY_PROMPT}/")}
    return PairData(
        chosen=torch.stack([get(f"latents/{s}") for s in pairs.chosen]),
        rejected=torch.stack([get(f"latents/{s}") for s in pairs.rejected]),
        embeds=torch.stack([get(f"prompt_embeds/{p}") for p in pairs.prompt_id]),
        pooled=torch.stack([get(f"pooled_embeds/{p}") for p in pairs.prompt_id]) if has_pooled else None,
        empty=empty or None,
    )


TRAIN_STREAM, HELD_STREAM = 0, 1


def step_generator(seed: int, iteration: int, step: int, micro: int, stream: int = TRAIN_STREAM) -> torch.Generator:
    state = np.random.SeedSequence([seed, iteration + 1, stream, step, micro]).generate_state(1)[0]
    return torch.Generator().manual_seed(int(state))


class PreferenceTrainer:
    """One iteration's training run.

    ``train.adapter: lora``: policy = base UNet + LoRA, reference = ``reference_unet`` or (None) the
    policy with its adapter disabled. ``adapter: none``: every UNet weight trains, the reference is
    ``reference_unet`` or (None) a frozen copy of the UNet as it starts.
    """

    def __init__(self, train_cfg: Mapping, unet, reference_unet, noise_scheduler, seed: int, iteration: int,
                 family: str = "sd15", vae_scale_factor: int = 8):
        import copy

        from accelerate import Accelerator

        from rewardloop.models.families import get_family
        from rewardloop.models.lora import attach_lora
        from rewardloop.training.optimizers import (apply_gpu_switches, build_lr_scheduler, build_optimizer,
                                           effective_learning_rate)

        if train_cfg.get("deterministic"):
            torch.use_deterministic_algorithms(True)
        self.cfg = train_cfg
        self.seed, self.iteration = seed, iteration
        self.family = get_family(family)
        self.vae_scale_factor = vae_scale_factor
        self.unet = unet
        self.policy = unet  # what the policy's forward goes through: the DDP wrapper once run() prepared it
        self.noise_scheduler = noise_scheduler
        apply_gpu_switches(train_cfg)
        self.accelerator = Accelerator(
            mixed_precision=train_cfg["mixed_precision"],
            gradient_accumulation_steps=train_cfg["gradient_accumulation_steps"],
            cpu=not torch.cuda.is_available(),
        )
        self.full = train_cfg.get("adapter", "lora") == "none"
        if self.full:
            if reference_unet is None and train_cfg["loss"] == "dpo":
                reference_unet = copy.deepcopy(unet)  # SFT needs no reference
            unet.requires_grad_(True)
            self.params = list(unet.parameters())
        else:
            # peft draws the LoRA init from torch's global generator: seed it, so runs repeat exactly.
            torch.manual_seed(int(np.random.SeedSequence([seed, iteration + 1]).generate_state(1)[0]))
            self.params = attach_lora(unet, train_cfg["lora"])
        if reference_unet is not None:
            reference_unet.requires_grad_(False).eval()
            if train_cfg.get("reference_offload"):
                reference_unet.to("cpu")
        self.reference_unet = reference_unet  # None: the policy with its adapter disabled
        if train_cfg.get("gradient_checkpointing"):
            unet.enable_gradient_checkpointing()
        self.learning_rate = effective_learning_rate(train_cfg, self.accelerator.num_processes)
        self.optimizer = build_optimizer(self.params, train_cfg, self.learning_rate)
        self.lr_scheduler = build_lr_scheduler(self.optimizer, train_cfg)

    def named_trainable(self):
        return [(n, p) for n, p in self.unet.named_parameters() if p.requires_grad]

    def checkpoint(self, state_dir, done: int, fingerprint: str, history: list) -> None:
        """Save the in-stage state after ``done`` steps; a state with broken weights is never saved."""
        self.require_finite_weights(done, state_dir)
        save_state(state_dir, done, fingerprint, self.named_trainable(), self.optimizer, self.lr_scheduler, history)

    def require_finite_weights(self, done: int, state_dir) -> None:
        """Stop when an update made a trained weight NaN or inf (the loss may still look finite)."""
        broken = [name for name, p in self.named_trainable() if not torch.isfinite(p).all()]
        if broken:
            raise TrainingError(
                f"iteration {self.iteration}, step {done - 1}: {len(broken)} trained tensor(s) became NaN or "
                f"inf (first: {broken[0]}); the last good state in {state_dir} is kept and no model is saved"
            )

    def _denoising_losses(self, unet, latents, noise, timesteps, cond) -> torch.Tensor:
        noisy = self.noise_scheduler.add_noise(latents, noise, timesteps)
        if self.noise_scheduler.config.prediction_type == "v_prediction":
            target = self.noise_scheduler.get_velocity(latents, noise, timesteps)
        else:
            target = noise
        pixel_size = latents.shape[-1] * self.vae_scale_factor
        with self.accelerator.autocast():
            prediction = unet(noisy, timesteps, **self.family.unet_kwargs(cond, pixel_size)).sample
        return losses.denoising_mse(prediction, target)

    @torch.no_grad()
    def _reference_losses(self, *args) -> torch.Tensor:
        if self.reference_unet is not None and self.cfg.get("reference_offload"):
            # Offloaded: on the device only for its forward pass.
            self.reference_unet.to(self.accelerator.device)
            try:
                return self._denoising_losses(self.reference_unet, *args)
            finally:
                self.reference_unet.to("cpu")
        if self.reference_unet is not None:
            return self._denoising_losses(self.reference_unet, *args)
        self.unet.disable_adapters()
        try:
            return self._denoising_losses(self.unet, *args)
        finally:
            self.unet.enable_adapters()

    def micro_batch(self, data: PairData, step: int, micro: int, stream: int = TRAIN_STREAM):
        """Indices, noise, timesteps, empty-prompt and flip masks of this process's part of a micro-batch.

        The global micro-batch (batch_size per process) is drawn whole and each rank takes its slice,
        so P processes of batch_size b train exactly as one process of batch_size P*b. Chosen and
        rejected share noise, timestep, prompt (or the empty prompt) and flip. With offline pairs, a
        ``data.offline_fraction`` share of the batch is drawn from them.
        """
        gen = step_generator(self.seed, self.iteration, step, micro, stream)
        size = self.cfg["batch_size"]
        total = size * self.accelerator.num_processes
        offline_count = self._offline_count(data, total)
        index = _draw(data.online, total - offline_count, gen)
        noise = torch.randn((total, *data.chosen.shape[1:]), generator=gen)
        timesteps = torch.randint(self.noise_scheduler.config.num_train_timesteps, (total,), generator=gen)
        # Drawn after noise and timesteps, so those do not depend on whether the options are on.
        empty_mask = torch.rand(total, generator=gen) < self.cfg.get("proportion_empty_prompts", 0.0)
        flip_mask = (torch.rand(total, generator=gen) < 0.5) & bool(self.cfg.get("hflip", False))
        if data.offline:
            index = torch.cat([index, data.online + _draw(data.offline, offline_count, gen)])
        mine = slice(self.accelerator.process_index * size, (self.accelerator.process_index + 1) * size)
        return index[mine], noise[mine], timesteps[mine], empty_mask[mine], flip_mask[mine]

    @staticmethod
    def _offline_count(data: PairData, total: int) -> int:
        if not data.offline:
            return 0
        if not data.online:
            return total
        return int(round(total * data.offline_fraction))

    def loss(self, data: PairData, step: int, micro: int, stream: int = TRAIN_STREAM) -> tuple[torch.Tensor, dict]:
        device = self.accelerator.device
        index, noise, timesteps, empty_mask, flip_mask = self.micro_batch(data, step, micro, stream)
        chosen = flip_latents(data.chosen[index], flip_mask).to(device)
        rejected = flip_latents(data.rejected[index], flip_mask).to(device)
        cond = {k: v.to(device) for k, v in data.conditioning(index, empty_mask).items()}
        noise, timesteps = noise.to(device), timesteps.to(device)
        if self.cfg["loss"] == "sft":
            policy = self._denoising_losses(self.policy, chosen, noise, timesteps, cond)
            return policy.mean(), {"train/loss": policy.mean().item()}
        inputs = (
            torch.cat([chosen, rejected]),
            torch.cat([noise, noise]),
            torch.cat([timesteps, timesteps]),
            {k: torch.cat([v, v]) for k, v in cond.items()},
        )
        policy_w, policy_l = self._denoising_losses(self.policy, *inputs).chunk(2)
        ref_w, ref_l = self._reference_losses(*inputs).chunk(2)
        loss, acc = losses.dpo_loss(policy_w, policy_l, ref_w, ref_l, self.cfg["beta"])
        return loss, {"train/loss": loss.item(), "train/implicit_acc": acc.item()}

    @torch.no_grad()
    def evaluate(self, data: PairData, batches: int = 4) -> dict:
        """Mean loss/accuracy on fixed held batches (noise and timesteps apart from the training stream)."""
        totals: dict[str, float] = {}
        for b in range(batches):
            _, logs = self.loss(data, step=b, micro=0, stream=HELD_STREAM)
            for key, value in logs.items():
                totals[key] = totals.get(key, 0.0) + value / batches
        return totals

    def run(self, data: PairData, state_dir, fingerprint: str, progress: bool = True) -> tuple[list[dict], int]:
        """Train ``cfg.steps`` optimizer steps, resuming from ``state_dir``.

        Returns (per-step metrics of the whole run, the step it resumed from).
        """
        unet, optimizer, lr_scheduler = self.accelerator.prepare(self.unet, self.optimizer, self.lr_scheduler)
        self.policy = unet
        start, history = load_state(state_dir, fingerprint, self.named_trainable(), self.optimizer, self.lr_scheduler)
        accumulation = self.cfg["gradient_accumulation_steps"]
        bar = tqdm(range(start, self.cfg["steps"]), desc="train", unit="step", disable=not progress)
        unet.train()
        for step in bar:
            started = time.perf_counter()
            logs: dict[str, float] = {}
            for micro in range(accumulation):
                with self.accelerator.accumulate(unet):
                    loss, micro_logs = self.loss(data, step, micro)
                    if not torch.isfinite(loss):
                        raise TrainingError(
                            f"iteration {self.iteration}, step {step}: loss is {loss.item()}; "
                            f"the last good state in {state_dir} is kept"
                        )
                    self.accelerator.backward(loss)
                    if self.accelerator.sync_gradients:
                        self.accelerator.clip_grad_norm_(self.params, self.cfg["max_grad_norm"])
                    optimizer.step()
                    lr_scheduler.step()
                    optimizer.zero_grad()
                for key, value in self._mean_over_processes(micro_logs).items():
                    logs[key] = logs.get(key, 0.0) + value / accumulation
            logs.update({"step": step, "lr": lr_scheduler.get_last_lr()[0], "time": time.perf_counter() - started})
            history.append(logs)
            bar.set_postfix(loss=f"{logs['train/loss']:.4f}")
            done = step + 1
            if done % self.cfg["checkpointing_steps"] == 0 and done < self.cfg["steps"]:
                if self.accelerator.is_main_process:  # every rank holds the same weights
                    self.checkpoint(state_dir, done, fingerprint, history)
                self.accelerator.wait_for_everyone()
        self.require_finite_weights(self.cfg["steps"], state_dir)
        unet.eval()
        return history, start

    def _mean_over_processes(self, logs: dict) -> dict:
        """Per-micro-batch metrics averaged over the ranks' slices (= the global micro-batch's)."""
        if self.accelerator.num_processes == 1:
            return logs
        keys = sorted(logs)
        values = torch.tensor([logs[k] for k in keys], dtype=torch.float64, device=self.accelerator.device)
        return dict(zip(keys, self.accelerator.reduce(values, reduction="mean").tolist()))


def _draw(population: int, count: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` indices into ``range(population)``: without replacement when there are enough."""
    if count <= 0:
        return torch.zeros(0, dtype=torch.long)
    if population >= count:
        return torch.randperm(population, generator=gen)[:count]
    return torch.randint(population, (count,), generator=gen)


def flip_latents(latents: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Horizontal flip (width axis) of the rows where ``mask`` is set (``train.hflip``)."""
    if not bool(mask.any()):
        return latents
    return torch.where(mask.view(-1, 1, 1, 1), latents.flip(-1), latents)


def summarize(history: list[dict], resumed_from: int) -> dict:
    """First/last quarter means of the training curves, for metrics.json."""
    if not history:
        return {"resumed_from_step": resumed_from}
    quarter = max(1, math.ceil(len(history) / 4))
    summary = {"resumed_from_step": resumed_from, "steps": len(history)}
    for key in ("train/loss", "train/implicit_acc"):
        if key in history[0]:
            summary[f"{key}/first_quarter"] = float(np.mean([h[key] for h in history[:quarter]]))
            summary[f"{key}/last_quarter"] = float(np.mean([h[key] for h in history[-quarter:]]))
    return summary

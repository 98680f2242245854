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

from rewardloop import losses
from rewardloop.artifacts import read_table, read_tensors
from rewardloop.train_state import load_state, save_state


class TrainingError(RuntimeError):
    pass


@dataclass
class PairData:
    """Pairs as tensors: chosen/rejected latents [P, C, h, w] and their prompt embeddings [P, L, D]."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    embeds: torch.Tensor

    def __len__(self) -> int:
        return len(self.chosen)


def load_pair_data(pairs_path, latents_path) -> PairData:
    pairs = read_table(pairs_path, required=["prompt_id", "chosen", "rejected"]).to_pandas()
    if pairs.empty:
        raise TrainingError(f"{pairs_path}: no preference pairs (all groups tied?)")
    tensors = read_tensors(latents_path)

    def get(key: str) -> torch.Tensor:
        if key not in tensors:
            raise TrainingError(f"{latents_path}: has no tensor {key!r} (needed by {pairs_path})")
        return tensors[key]

    return PairData(
        chosen=torch.stack([get(f"latents/{s}") for s in pairs.chosen]),
        rejected=torch.stack([get(f"latents/{s}") for s in pairs.rejected]),
        embeds=torch.stack([get(f"prompt_embeds/{p}") for p in pairs.prompt_id]),
    )


TRAIN_STREAM, HELD_STREAM = 0, 1


def step_generator(seed: int, iteration: int, step: int, micro: int, stream: int = TRAIN_STREAM) -> torch.Generator:
    state = np.random.SeedSequence([seed, iteration + 1, stream, step, micro]).generate_state(1)[0]
    return torch.Generator().manual_seed(int(state))


class PreferenceTrainer:
    """One iteration's training run: policy = base UNet + LoRA; reference = base or previous model."""

    def __init__(self, train_cfg: Mapping, unet, reference_unet, noise_scheduler, seed: int, iteration: int):
        from accelerate import Accelerator
        from diffusers.optimization import get_scheduler

        from rewardloop.lora import attach_lora

        self.cfg = train_cfg
        self.seed, self.iteration = seed, iteration
        self.unet = unet
        self.policy = unet  # what the policy's forward goes through: the DDP wrapper once run() prepared it
        self.reference_unet = reference_unet  # None: the policy with its adapter disabled
        self.noise_scheduler = noise_scheduler
        self.accelerator = Accelerator(
            mixed_precision=train_cfg["mixed_precision"],
            gradient_accumulation_steps=train_cfg["gradient_accumulation_steps"],
            cpu=not torch.cuda.is_available(),
        )
        # peft draws the LoRA init from torch's global generator: seed it, so runs repeat exactly.
        torch.manual_seed(int(np.random.SeedSequence([seed, iteration + 1]).generate_state(1)[0]))
        self.params = attach_lora(unet, train_cfg["lora"])
        self.optimizer = torch.optim.AdamW(
            self.params, lr=train_cfg["learning_rate"], weight_decay=train_cfg["weight_decay"]
        )
        self.lr_scheduler = get_scheduler(
            train_cfg["lr_scheduler"],
            optimizer=self.optimizer,
            num_warmup_steps=train_cfg["lr_warmup_steps"],
            num_training_steps=train_cfg["steps"],
        )

    def named_trainable(self):
        return [(n, p) for n, p in self.unet.named_parameters() if p.requires_grad]

    def _denoising_losses(self, unet, latents, noise, timesteps, embeds) -> torch.Tensor:
        noisy = self.noise_scheduler.add_noise(latents, noise, timesteps)
        if self.noise_scheduler.config.prediction_type == "v_prediction":
            target = self.noise_scheduler.get_velocity(latents, noise, timesteps)
        else:
            target = noise
        prediction = unet(noisy, timesteps, encoder_hidden_states=embeds).sample
        return losses.denoising_mse(prediction, target)

    @torch.no_grad()
    def _reference_losses(self, *args) -> torch.Tensor:
        if self.reference_unet is not None:
            return self._denoising_losses(self.reference_unet, *args)
        self.unet.disable_adapters()
        try:
            return self._denoising_losses(self.unet, *args)
        finally:
            self.unet.enable_adapters()

    def micro_batch(self, data: PairData, step: int, micro: int, stream: int = TRAIN_STREAM):
        """Indices, noise and timesteps of this process's part of one micro-batch.

        The global micro-batch (batch_size per process) is drawn whole and each rank takes its slice,
        so P processes of batch_size b train exactly as one process of batch_size P*b. Noise and
        timesteps are identical for chosen and rejected.
        """
        gen = step_generator(self.seed, self.iteration, step, micro, stream)
        size = self.cfg["batch_size"]
        total = size * self.accelerator.num_processes
        if len(data) >= total:
            index = torch.randperm(len(data), generator=gen)[:total]
        else:
            index = torch.randint(len(data), (total,), generator=gen)
        noise = torch.randn((total, *data.chosen.shape[1:]), generator=gen)
        timesteps = torch.randint(self.noise_scheduler.config.num_train_timesteps, (total,), generator=gen)
        mine = slice(self.accelerator.process_index * size, (self.accelerator.process_index + 1) * size)
        return index[mine], noise[mine], timesteps[mine]

    def loss(self, data: PairData, step: int, micro: int, stream: int = TRAIN_STREAM) -> tuple[torch.Tensor, dict]:
        device = self.accelerator.device
        index, noise, timesteps = self.micro_batch(data, step, micro, stream)
        chosen, rejected = data.chosen[index].to(device), data.rejected[index].to(device)
        embeds = data.embeds[index].to(device)
        noise, timesteps = noise.to(device), timesteps.to(device)
        if self.cfg["loss"] == "sft":
            policy = self._denoising_losses(self.policy, chosen, noise, timesteps, embeds)
            return policy.mean(), {"train/loss": policy.mean().item()}
        inputs = (
            torch.cat([chosen, rejected]),
            torch.cat([noise, noise]),
            torch.cat([timesteps, timesteps]),
            torch.cat([embeds, embeds]),
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
                    save_state(
                        state_dir, done, fingerprint, self.named_trainable(), self.optimizer, self.lr_scheduler,
                        history,
                    )
                self.accelerator.wait_for_everyone()
        unet.eval()
        return history, start

    def _mean_over_processes(self, logs: dict) -> dict:
        """Per-micro-batch metrics averaged over the ranks' slices (= the global micro-batch's)."""
        if self.accelerator.num_processes == 1:
            return logs
        keys = sorted(logs)
        values = torch.tensor([logs[k] for k in keys], dtype=torch.float64, device=self.accelerator.device)
        return dict(zip(keys, self.accelerator.reduce(values, reduction="mean").tolist()))


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

"""One training loop for every objective: accelerate, adapter, optimizer, accumulation, resume.

The Trainer knows no loss. It attaches the adapter (a LoRA, or every denoiser weight with
``train.adapter: none``), builds the optimizer and schedule, asks the objective for the
iteration's plan (a list of optimizer updates, each a list of micro-batches), and runs it: the
mean of the micro-batches' losses is one optimizer step, with gradient clipping, the objective's
hooks, an in-stage checkpoint every ``checkpointing_steps`` and a finite-weights guard. Every
micro-batch is a pure function of (seed, iteration, step, micro), so resuming from a checkpoint
reproduces the uninterrupted run exactly. Several processes (``accelerate launch``) each take
their slice of every micro-batch, for objectives that allow it: DDP, or with ``train.distributed:
fsdp`` the denoiser's weights, gradients and optimizer states sharded over them (rewardloop.training.fsdp).
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import torch
from tqdm.auto import tqdm

from rewardloop.training import fsdp
from rewardloop.training.config import TrainConfig
from rewardloop.training.policy import Policy
from rewardloop.training.state import load_state, save_state


class TrainingError(RuntimeError):
    pass


class Trainer:
    """``denoiser``: the model to train (UNet or transformer); ``reference_model``: a frozen model the
    objective compares against, or None (the policy with its adapter disabled)."""

    def __init__(self, cfg: TrainConfig, denoiser, seed: int, iteration: int, reference_model=None):
        from accelerate import Accelerator

        from rewardloop.models.lora import attach_lora
        from rewardloop.training.optimizers import apply_gpu_switches, build_optimizer, effective_learning_rate

        if cfg.deterministic:
            torch.use_deterministic_algorithms(True)
        self.cfg, self.seed, self.iteration = cfg, seed, iteration
        apply_gpu_switches(cfg)
        # Accumulation is the plan's (a list of micro-batches per update), so accelerate accumulates nothing.
        self.accelerator = Accelerator(mixed_precision=cfg.mixed_precision, cpu=not torch.cuda.is_available(),
                                       kwargs_handlers=collective_timeout(cfg.collective_timeout_s))
        # FSDP shards over several processes; in one there is nothing to shard and it trains as without.
        self.fsdp = cfg.distributed == "fsdp" and self.accelerator.num_processes > 1
        if cfg.adapter == "none":
            denoiser.requires_grad_(True)
            params = list(denoiser.parameters())
        else:
            # peft draws the LoRA init from torch's global generator: seed it, so runs repeat exactly.
            torch.manual_seed(int(np.random.SeedSequence([seed, iteration + 1]).generate_state(1)[0]))
            params = attach_lora(denoiser, cfg.lora)
        if reference_model is not None:
            reference_model.requires_grad_(False).eval()
            if cfg.reference_offload:
                reference_model.to("cpu")
        if cfg.gradient_checkpointing:
            denoiser.enable_gradient_checkpointing()
        self.policy = Policy(denoiser, self.accelerator, params, reference_model, cfg.reference_offload)
        self.learning_rate = effective_learning_rate(cfg, self.accelerator.num_processes)
        self.optimizer = build_optimizer(params, cfg, self.learning_rate)

    @property
    def model(self):
        """The denoiser with its adapter (what save_lora and load_lora_into take)."""
        return self.policy.model

    @property
    def params(self) -> list:
        return self.policy.trainable

    def require_finite_weights(self, done: int, state_dir) -> None:
        """Stop when an update made a trained weight NaN or inf (the loss may still look finite)."""
        broken = [name for name, p in self.policy.named_trainable() if not torch.isfinite(fsdp.local(p)).all()]
        # Under FSDP each rank checks its shards and every rank stops with the one that found a broken one.
        if self.fsdp and fsdp.any_rank(bool(broken), self.accelerator.device) and not broken:
            broken = ["(a shard held by another rank)"]
        if broken:
            raise TrainingError(
                f"iteration {self.iteration}, step {done - 1}: {len(broken)} trained tensor(s) became NaN or "
                f"inf (first: {broken[0]}); the last good state in {state_dir} is kept and no model is saved"
            )

    def run(self, objective, data, state_dir, fingerprint: str, progress: bool = True) -> tuple[list[dict], int]:
        """Run the objective's plan, resuming from ``state_dir``; (per-update metrics, the step resumed from)."""
        from rewardloop.training.optimizers import build_lr_scheduler

        plan = objective.plan(data, self.accelerator.num_processes)
        if self.fsdp:
            self._shard()
        lr_scheduler = build_lr_scheduler(self.optimizer, self.cfg, len(plan))
        if self.fsdp:  # the sharded model is its own wrapper: accelerate would put DDP around it
            module = self.policy.model
            optimizer, lr_scheduler = self.accelerator.prepare(self.optimizer, lr_scheduler)
        else:
            module, optimizer, lr_scheduler = self.accelerator.prepare(self.policy.model, self.optimizer,
                                                                       lr_scheduler)
        self.policy.module = module
        objective.start(self.policy, data)  # before a resume restores mid-iteration weights
        named = self.policy.named_trainable()
        if objective.extra_adapters_per_step:  # weight sets that move with every step are part of the state
            named += [(f"{name}.{i}", weight) for name in objective.extra_adapters
                      for i, weight in enumerate(self.policy.extra[name])]
        start, history = load_state(state_dir, fingerprint, named, self.optimizer, lr_scheduler,
                                    place=fsdp.shard_like)
        module.train()
        bar = tqdm(range(start, len(plan)), desc="train", unit="step", disable=not progress)
        for step in bar:
            started = time.perf_counter()
            micros = plan[step]
            logs: dict[str, float] = {}
            optimizer.zero_grad()
            for m, micro in enumerate(micros):
                # Gradients of all but the last micro-batch stay local (DDP syncs once per update); FSDP
                # reduce-scatters each micro-batch's, so that no rank ever holds a whole model's gradients.
                last = m == len(micros) - 1 or self.fsdp
                with contextlib.nullcontext() if last else self.accelerator.no_sync(module):
                    loss, micro_logs = objective.loss(self.policy, data, micro)
                    if not torch.isfinite(loss):
                        raise TrainingError(f"iteration {self.iteration}, step {step}: loss is {loss.item()}; "
                                            f"the last good state in {state_dir} is kept")
                    self.accelerator.backward(loss / len(micros))
                for key, value in self._mean_over_processes(micro_logs).items():
                    logs[key] = logs.get(key, 0.0) + value / len(micros)
            if objective.steps_optimizer:
                self.accelerator.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
                optimizer.step()
                lr_scheduler.step()
                objective.after_update(self.policy, step)
            logs.update({"step": step, "lr": lr_scheduler.get_last_lr()[0], "time": time.perf_counter() - started})
            history.append(logs)
            bar.set_postfix(loss=f"{logs['train/loss']:.4f}")
            done = step + 1
            if done % self.cfg.checkpointing_steps == 0 and done < len(plan):
                self.checkpoint(state_dir, done, fingerprint, named, lr_scheduler, history)
        objective.finish(self.policy, len(plan))
        self.require_finite_weights(len(plan), state_dir)
        module.eval()
        return history, start

    def checkpoint(self, state_dir, done: int, fingerprint: str, named, lr_scheduler, history) -> None:
        """The in-stage state, written by rank 0: under DDP every rank holds the same weights; under FSDP every rank
        gathers the whole tensors with rank 0 (the file is the same as without FSDP)."""
        main = self.accelerator.is_main_process
        if self.fsdp:
            self.require_finite_weights(done, state_dir)
            save_state(state_dir, done, fingerprint, named, self.optimizer, lr_scheduler, history,
                       gather=lambda items: fsdp.full_tensors(items, main), write=main)
        elif main:
            self.require_finite_weights(done, state_dir)
            save_state(state_dir, done, fingerprint, named, self.optimizer, lr_scheduler, history)
        self.accelerator.wait_for_everyone()

    @contextlib.contextmanager
    def gathered(self, lora_only: bool):
        """Within: the model's ``state_dict()`` is its whole weights on rank 0 (the LoRA's only, with
        ``lora_only``), so the usual savers write the usual files. Every rank enters (under FSDP it gathers)."""
        if not self.fsdp:
            yield
            return
        keep = (lambda key: "lora_" in key) if lora_only else (lambda key: True)
        with fsdp.gathered_state_dict(self.policy.model, keep, self.accelerator.is_main_process):
            yield

    def _shard(self) -> None:
        """FSDP: shard the policy (and a separate reference), then point the trained-parameter list, the
        optimizer and the objective's further weight sets at the sharded parameters (fully_shard replaces
        them), in the same order as before, so the checkpoint's optimizer indices are those of a DDP run."""
        from rewardloop.training.optimizers import build_optimizer

        model, device = self.policy.model, self.accelerator.device
        names = {id(p): n for n, p in model.named_parameters()}
        order = [names[id(p)] for p in self.policy.trainable]
        fsdp.shard_model(model, self.cfg.mixed_precision, device)
        if self.policy.reference_model is not None:
            fsdp.shard_model(self.policy.reference_model, self.cfg.mixed_precision, device)
        sharded = dict(model.named_parameters())
        self.policy.trainable = [sharded[n] for n in order]
        self.policy.extra = {name: [fsdp.shard_like(t, p) for t, p in zip(weights, self.policy.trainable)]
                             for name, weights in self.policy.extra.items()}
        self.optimizer = build_optimizer(self.policy.trainable, self.cfg, self.learning_rate)

    def _mean_over_processes(self, logs: dict) -> dict:
        """Per-micro-batch metrics averaged over the ranks' slices (= the global micro-batch's)."""
        if self.accelerator.num_processes == 1:
            return logs
        keys = sorted(logs)
        values = torch.tensor([logs[k] for k in keys], dtype=torch.float64, device=self.accelerator.device)
        return dict(zip(keys, self.accelerator.reduce(values, reduction="mean").tolist()))


def collective_timeout(seconds: float | None) -> list:
    """accelerate's process-group settings for ``train.collective_timeout_s``: a rank waiting longer than this
    in a collective (its peer frozen, a node unreachable) raises, so the launch fails instead of hanging for
    torch's default (30 min for gloo, 10 for NCCL). None keeps torch's default."""
    if seconds is None:
        return []
    from datetime import timedelta

    from accelerate.utils import InitProcessGroupKwargs

    return [InitProcessGroupKwargs(timeout=timedelta(seconds=seconds))]

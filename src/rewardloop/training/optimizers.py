"""Optimizer, learning rate and GPU switches of a training run (EXPO/DiffusionDPO train.py's options).

``train.scale_lr`` multiplies the learning rate by accumulation x batch x processes, as
``--scale_lr`` does; ``train.optimizer`` picks AdamW (torch), Adafactor (transformers, as
``--use_adafactor``) or 8-bit AdamW (bitsandbytes, optional).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rewardloop.training.config import TrainConfig

OPTIMIZERS = ("adamw", "adafactor", "adamw_8bit")


class OptimizerError(ValueError):
    pass


def effective_learning_rate(train_cfg: TrainConfig, num_processes: int = 1) -> float:
    """``learning_rate``, times accumulation x per-process batch x processes with ``scale_lr``."""
    lr = float(train_cfg.learning_rate)
    if train_cfg.scale_lr:
        lr *= train_cfg.gradient_accumulation_steps * train_cfg.batch_size * num_processes
    return lr


def build_optimizer(params, train_cfg: TrainConfig, lr: float):
    name = train_cfg.optimizer
    betas = (train_cfg.adam_beta1, train_cfg.adam_beta2)
    if name == "adamw":
        import torch

        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=train_cfg.adam_epsilon,
                                 weight_decay=train_cfg.weight_decay)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        # DiffusionDPO's settings: a fixed external lr (no relative step, no parameter scaling).
        return Adafactor(params, lr=lr, weight_decay=train_cfg.weight_decay, clip_threshold=1.0,
                         scale_parameter=False, relative_step=False)
    if name == "adamw_8bit":
        try:
            import bitsandbytes as bnb
        except ImportError as exc:
            raise OptimizerError(
                "train.optimizer: adamw_8bit needs the optional package bitsandbytes (pip install bitsandbytes, "
                "CUDA only); use adamw or adafactor otherwise"
            ) from exc
        return bnb.optim.AdamW8bit(params, lr=lr, betas=betas, eps=train_cfg.adam_epsilon,
                                   weight_decay=train_cfg.weight_decay)
    raise OptimizerError(f"train.optimizer: unknown optimizer {name!r} (expected one of {', '.join(OPTIMIZERS)})")


def build_lr_scheduler(optimizer, train_cfg: TrainConfig, total_steps: int):
    """A diffusers schedule over the iteration's ``total_steps`` optimizer steps."""
    from diffusers.optimization import get_scheduler

    return get_scheduler(
        train_cfg.lr_scheduler,
        optimizer=optimizer,
        num_warmup_steps=train_cfg.lr_warmup_steps,
        num_training_steps=total_steps,
    )


def apply_gpu_switches(train_cfg: TrainConfig) -> None:
    """TF32 matmuls/convolutions on Ampere+ GPUs (``train.allow_tf32``); a no-op on the CPU."""
    import torch

    if train_cfg.allow_tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

"""The training loop's options (the ``train:`` section without its objective subsections), typed.

Every key is described, with its default, in ``schemas/config.schema.yaml``; an objective's own
options live in its module (``train.<objective>``, see :mod:`rewardloop.objectives.options`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class TrainConfig:
    """Built from a validated section (the schema holds the defaults, so none are repeated here)."""

    loss: str  # the objective (rewardloop.objectives)
    steps: int  # optimizer steps of the pair objectives (dpo, sft)
    batch_size: int  # per process
    gradient_accumulation_steps: int
    learning_rate: float
    lr_scheduler: str
    lr_warmup_steps: int
    scale_lr: bool
    optimizer: str
    adam_beta1: float
    adam_beta2: float
    adam_epsilon: float
    weight_decay: float
    max_grad_norm: float
    mixed_precision: str
    checkpointing_steps: int
    num_processes: int | None
    distributed: str  # ddp | fsdp: how several processes hold the model (rewardloop.training.fsdp)
    collective_timeout_s: float | None  # a rank waiting longer in a collective fails the launch
    adapter: str  # lora | none (full fine-tuning)
    reference_offload: bool
    gradient_checkpointing: bool
    allow_tf32: bool
    deterministic: bool
    # Pair data (dpo, sft): EXPO's augmentations and loader.
    proportion_empty_prompts: float
    hflip: bool
    random_crop: bool
    dataloader_num_workers: int
    lora: Mapping  # rank, alpha, targets

    @classmethod
    def from_section(cls, section: Mapping) -> TrainConfig:
        """The loop's keys of a validated ``train`` section (objective subsections are not the loop's)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in section.items() if k in names})

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)

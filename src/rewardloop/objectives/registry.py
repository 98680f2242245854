"""The objective registry: what the DAG, the config and the training loop need to know of each objective.

An objective is one class in one module of this package, registered with ``@objective("name")``
and imported once in ``objectives/__init__.py``. It declares its training signal, whether its
rollouts record their SDE/DDIM steps, what it needs of a model family (traits such as
"flow_matching", never a list of family names) and its own typed options
(``train.<name>``); it turns the stage's tables and tensors into training data, plans the
optimizer updates, and computes ``loss(policy, data, micro) -> (loss, logs)``. It reads no file
and knows no stage: the train stage reads the inputs, the :class:`~rewardloop.training.trainer.Trainer`
runs the updates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

import numpy as np

from rewardloop.objectives.options import NoOptions, from_section, section_schema

if TYPE_CHECKING:
    import pandas as pd

    from rewardloop.models.families import ModelFamily
    import torch

    from rewardloop.training.config import TrainConfig
    from rewardloop.training.policy import Policy


class ObjectiveError(ValueError):
    """A config or input an objective cannot train on; the message names the key or file."""


@dataclass
class TrainingInputs:
    """What the train stage read for the objective: the signal table and latents.safetensors' tensors.

    The paths are only for messages.
    """

    signal: pd.DataFrame
    tensors: Mapping[str, torch.Tensor]
    signal_path: str
    latents_path: str

    def rows(self, columns: tuple[str, ...], what: str) -> pd.DataFrame:
        """The signal table, refused when it lacks ``columns`` or is empty (``what`` says what an empty one lacks)."""
        missing = [c for c in columns if c not in self.signal.columns]
        if missing:
            raise ObjectiveError(f"{self.signal_path}: missing column(s) {', '.join(missing)}")
        if self.signal.empty:
            raise ObjectiveError(f"{self.signal_path}: {what}")
        return self.signal

    def tensor(self, key: str) -> torch.Tensor:
        if key not in self.tensors:
            raise ObjectiveError(f"{self.latents_path}: has no tensor {key!r} (needed by {self.signal_path})")
        return self.tensors[key]


@dataclass(frozen=True)
class ModelInfo:
    """What an objective knows of the model: its family, its scheduler's config, its VAE's downscale factor."""

    family: ModelFamily
    scheduler_config: Mapping
    vae_scale_factor: int


class Objective:
    """Base class. A subclass sets the class attributes below and implements load, plan and loss."""

    name: ClassVar[str]
    signal: ClassVar[str] = "pairs"  # what it learns from: pairs.parquet or advantages.parquet
    records_steps: ClassVar[bool] = False  # its rollouts record the stochastic steps (log-probs)
    # The family traits it trains on (ModelFamily.traits: "flow_matching" or "ddpm", "recorded_steps"); empty: any.
    needs: ClassVar[frozenset[str]] = frozenset()
    Options: ClassVar[type] = NoOptions  # the dataclass of train.<name>
    description: ClassVar[str] = ""
    multi_process: ClassVar[bool] = False  # can split each micro-batch over `accelerate launch` ranks
    full_model: ClassVar[bool] = False  # supports train.adapter: none
    offline_pairs: ClassVar[bool] = False  # mixes in data.offline_pairs
    keeps_tied_groups: ClassVar[bool] = False  # advantages keep groups of equal rewards (at A = 0)
    rollout_adapter: ClassVar[str] = "current"  # "old": rollouts sample the objective's old policy
    extra_adapters: ClassVar[tuple[str, ...]] = ()  # weight sets kept beside the LoRA, in model(it)/<name>/
    extra_adapters_per_step: ClassVar[bool] = False  # after_update changes them: in-stage checkpoints save them
    curves: ClassVar[tuple[str, ...]] = ("train/loss",)  # summarised in metrics.json
    moved_keys: ClassVar[Mapping[str, str]] = {}  # old flat train.<key> -> this objective's key
    preflight_checks: ClassVar[tuple[str, ...]] = ()  # what rule preflight checks (objectives/alignment.py)

    def __init__(self, options, train: TrainConfig, seed: int, iteration: int, config: Mapping | None = None):
        self.options, self.train, self.seed, self.iteration = options, train, seed, iteration
        self.config = config or {}  # the train job's config (seed, train, and advantages for the group objectives)

    @classmethod
    def from_config(cls, config: Mapping, iteration: int) -> Objective:
        """From a validated config (or the train job's part of it)."""
        from rewardloop.training.config import TrainConfig

        train = config["train"]
        return cls(from_section(cls.Options, train.get(cls.name)), TrainConfig.from_section(train), config["seed"],
                   iteration, config)

    @classmethod
    def supports(cls, family: ModelFamily) -> bool:
        return cls.needs <= family.traits

    @classmethod
    def family_names(cls) -> list[str]:
        """The registered model families it trains (registry order)."""
        from rewardloop.models.families import FAMILIES

        return [name for name, family in FAMILIES.items() if cls.supports(family)]

    @classmethod
    def schema(cls) -> dict:
        return section_schema(cls.Options, f"Options of train.loss {cls.name}: {cls.description}")

    @classmethod
    def check(cls, config: Mapping) -> None:
        """Startup checks beyond the schema (raise ObjectiveError naming the key)."""

    @classmethod
    def smoke_overlay(cls, config: Mapping) -> dict:
        """What the recipe smoke (smoke/overlay.py) must set besides its shortened sizes for ``config`` (a recipe
        with those sizes) to pass :meth:`check`; most objectives need nothing."""
        return {}

    # What the train stage must provide.
    def reference(self) -> str | None:
        """A frozen reference model the stage loads: "base", "previous" or None (the LoRA disabled, or none)."""
        return None

    # Data and plan.
    def load(self, inputs: TrainingInputs, model: ModelInfo) -> Any:
        """The training data (tensors) from the stage's inputs."""
        raise NotImplementedError

    def plan(self, data, processes: int) -> list[list[Any]]:
        """The optimizer updates of the iteration, each a list of micro-batch keys for :meth:`loss`."""
        raise NotImplementedError

    def loss(self, policy: Policy, data, micro) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError

    # Hooks.
    def start(self, policy: Policy, data) -> None:
        """Called once the policy holds model(it-1)'s weights, before a resume restores in-stage ones."""

    def after_update(self, policy: Policy, step: int) -> None:
        """Called after each optimizer step."""

    def finish(self, policy: Policy, updates: int) -> None:
        """Called once after the last of the iteration's ``updates`` (not saved in in-stage checkpoints)."""

    @property
    def steps_optimizer(self) -> bool:
        """False: compute losses and logs only (a debug pass that leaves the weights as they were)."""
        return True

    def summarize(self, history: list[dict], resumed_from: int) -> dict:
        """Means of :attr:`curves` over the run and over its first and last quarters, for metrics.json."""
        summary = {"resumed_from_step": resumed_from, "steps": len(history)}
        if history:
            quarter = max(1, math.ceil(len(history) / 4))
            for key in self.curves:
                if key in history[0]:
                    # Not the bare curve name: tracking logs these beside the curve, which owns its steps.
                    summary[f"{key}/mean"] = float(np.mean([h[key] for h in history]))
                    summary[f"{key}/first_quarter"] = float(np.mean([h[key] for h in history[:quarter]]))
                    summary[f"{key}/last_quarter"] = float(np.mean([h[key] for h in history[-quarter:]]))
        return summary


OBJECTIVES: dict[str, type[Objective]] = {}


def objective(name: str):
    """Class decorator: register an Objective subclass under ``train.loss: name``."""

    def register(cls):
        if name in OBJECTIVES:
            raise ValueError(f"objective {name!r} registered twice")
        cls.name = name
        OBJECTIVES[name] = cls
        return cls

    return register


def get_objective(name: str) -> type[Objective]:
    if name not in OBJECTIVES:
        raise ObjectiveError(f"train.loss: unknown objective {name!r} (expected one of {', '.join(sorted(OBJECTIVES))})")
    return OBJECTIVES[name]

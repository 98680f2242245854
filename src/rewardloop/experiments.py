"""An experiments fan-out: named overlays of one config, each run once per seed in one DAG.

Each variant × seed is a run of its own under ``results/<name>/seed_<s>/`` (the single-run layout:
``iter_XXX/``, ``report/``, ...), a Snakemake module of ``rules/run.smk`` (see rules/experiments.smk).
The model build and the base model's eval run once, in ``results/base/``, and every run links that
eval in: so the variants may change anything but what those two read, which ``plan_runs`` checks
before any job starts.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping

from rewardloop import results_layout as layout
from rewardloop.config import ConfigError, validate
from rewardloop.runtime import prompt_pins
from rewardloop.runtime.job_config import eval_config, guidance_evals
from rewardloop.mappings import deep_merge

# The keys of the run's config that tell a fan-out's run where it lives (rules/common.smk reads them).
RUN_KEY = "_experiment"
FANOUT_KEYS = ("experiments", "seeds")
# What the shared model build reads: an experiment may not change it.
SHARED_SECTIONS = ("model", "tiny")
# Folder names under results/ that are not experiments.
RESERVED_NAMES = {layout.BASE, layout.REPORT, "logs", "benchmarks", "tracking", "mlartifacts", layout.OFFLINE_DIR, "shared",
                  prompt_pins.FOLDER}


@dataclass(frozen=True)
class ExperimentRun:
    """One variant × seed: its name, seed, folder and validated config (with RUN_KEY filled)."""

    experiment: str
    seed: int
    folder: str
    config: dict

    @property
    def module(self) -> str:
        """The Snakemake module's name, which prefixes its rules' names (``grpo_seed0_train``)."""
        return f"{self.experiment}_seed{self.seed}_"


def run_folder(results: str, experiment: str, seed: int) -> str:
    return f"{results}/{experiment}/seed_{seed}"


def first_difference(a: Any, b: Any, prefix: str = "") -> str | None:
    """The dotted key at which two nested values first differ, or None when they are equal."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            where = f"{prefix}.{key}" if prefix else str(key)
            if key not in a or key not in b:
                return where
            found = first_difference(a[key], b[key], where)
            if found:
                return found
        return None
    return None if a == b else (prefix or "(top level)")


def _check_shared(name: str, config: Mapping, base: Mapping) -> None:
    """Refuse a variant that changes what the shared model build or base eval reads."""
    for section in SHARED_SECTIONS:
        key = first_difference(config[section], base[section], section)
        if key:
            raise ConfigError(f"experiments.{name}: changes {key}, which the shared model build reads "
                              f"(results/{layout.BASE}/ serves every experiment); set it in the base config instead")
    key = first_difference(eval_config(config), eval_config(base))
    if not key and guidance_evals(config) != guidance_evals(base):
        key = "eval.also_at_guidance"
    if key:
        raise ConfigError(f"experiments.{name}: changes {key}, which the held-out eval reads (the base "
                          f"model's eval in results/{layout.BASE}/ is shared by every experiment, and an iteration's "
                          f"eval must be comparable with it); set it in the base config instead")


def plan_runs(given: Mapping, base: Mapping, results: str = "results") -> list[ExperimentRun]:
    """The runs of a fan-out, in order (experiments as written, then seeds); [] for a single run.

    ``given``: the config as the user wrote it (files and --config merged, before validation), over
    which each experiment's overlay is merged, so that defaults derived from other keys (a family's
    resolution, the chosen objective's section) follow the overlay; ``base``: ``given`` validated.
    """
    experiments, seeds = base["experiments"], base["seeds"]
    if not experiments:
        if seeds is not None:
            raise ConfigError("seeds: only used with experiments (name the variants under experiments:, "
                              "or set seed: for a single run)")
        return []
    common = {key: value for key, value in given.items() if key not in FANOUT_KEYS}
    runs = []
    for name, overlay in experiments.items():
        if name in RESERVED_NAMES or name.startswith((layout.ITERATION_PREFIX, "seed_")):
            raise ConfigError(f"experiments.{name}: the name is taken by a folder of results/ "
                              f"({', '.join(sorted(RESERVED_NAMES))}, {layout.ITERATION_PREFIX}*, seed_*); choose another")
        for key in FANOUT_KEYS:
            if key in overlay:
                raise ConfigError(f"experiments.{name}.{key}: an experiment cannot set {key} (set it at the top level)")
        try:
            config = validate(deep_merge(common, overlay))
        except ConfigError as exc:
            raise ConfigError(f"experiments.{name}: {exc}") from None
        _check_shared(name, config, base)
        for seed in seeds or [config["seed"]]:
            folder = run_folder(results, name, seed)
            run_config = copy.deepcopy(config)
            run_config["seed"] = seed
            run_config[RUN_KEY] = {"name": name, "seed": seed, "dir": folder, "shared": results}
            runs.append(ExperimentRun(name, seed, folder, run_config))
    return runs

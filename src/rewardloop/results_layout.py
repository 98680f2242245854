"""Where every artifact of a run lives: the one owner of the results folder's paths.

A run folder (``results/``, or a fan-out's ``results/<experiment>/seed_<s>/``) holds::

    base/                     the base model, model(-1): eval.parquet, metrics/eval.json, health.parquet,
                              benchmark/<name>.parquet (rewardloop benchmark), ...
    iter_000/ iter_001/ ...   one folder per iteration (zero-padded so listings sort)
        samples.parquet latents.safetensors scores.parquet <signal>.parquet eval.parquet
        train/ checkpoint/ shards/<stage>_<kk>/ rescore/<gold>.{parquet,json} benchmark/<name>.parquet
        metrics/<stage>.json  guard.json  tracking.json  health.parquet  grid.png  eval_grid.png
    logs/<folder>/<job>.log  benchmarks/<folder>/<job>.tsv
    report/  tracking/run.json  offline/  best.json  best -> iter_XXX/checkpoint

Names within a folder are constants or functions of a stage (``metrics_name("train")``); the run-level
paths are :class:`RunLayout`'s. Every function that takes an iteration also takes a Snakemake wildcard
as a string (``iteration_name("{it}") == "iter_{it}"``): the rules build their patterns from here at
planning time, so this module imports nothing heavy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

# ------------------------------------------------------------------------------ folders of a run

BASE = "base"  # the base model's folder
BASE_ITERATION = -1  # the base model's iteration number, wherever a folder is told by its number
ITERATION_PREFIX = "iter_"
ITERATION_DIGITS = 3
ITERATION_GLOB = "iter_" + "[0-9]" * ITERATION_DIGITS  # every iteration folder of a run (Path.glob)
ITERATION_REGEX = rf"\d{{{ITERATION_DIGITS}}}"  # the {it} wildcard's constraint
FOLDER_REGEX = rf"{BASE}|{ITERATION_PREFIX}{ITERATION_REGEX}"  # the {folder} wildcard's: base or an iteration
_FOLDER_NAME = re.compile(rf"{ITERATION_PREFIX}({ITERATION_REGEX})")


def iteration_name(it: int | str) -> str:
    """The folder name of iteration ``it``: ``iter_003`` for 3 or "3"; a wildcard pattern is kept as it
    is (``iter_{it}`` for "{it}"), for Snakemake to fill in."""
    if isinstance(it, str) and not it.isdigit():
        return f"{ITERATION_PREFIX}{it}"
    number = int(it)
    if number < 0:
        raise ValueError(f"iteration {it}: an iteration folder's number is 0 or more (the base model is {BASE}/)")
    return f"{ITERATION_PREFIX}{number:0{ITERATION_DIGITS}d}"


def folder_name(iteration: int) -> str:
    """``base`` for the base model (iteration -1), else the iteration's folder name."""
    return BASE if int(iteration) == BASE_ITERATION else iteration_name(iteration)


def parse_folder_name(name: str) -> int | None:
    """The iteration of a folder name: -1 for ``base``, 3 for ``iter_003``; None for any other name."""
    if name == BASE:
        return BASE_ITERATION
    match = _FOLDER_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def folder_iteration(name: str) -> int:
    """:func:`parse_folder_name`, refusing a name that is neither base nor an iteration folder."""
    iteration = parse_folder_name(name)
    if iteration is None:
        raise ValueError(f"folder {name!r}: expected {BASE} or {ITERATION_PREFIX}{'N' * ITERATION_DIGITS}")
    return iteration


# ------------------------------------------------------------------------------ stages

# The training signals an objective's stage can make (Objective.signal): preference pairs or group
# advantages; the summary's columns list them in this order.
SIGNALS = ("advantages", "pairs")
EVAL_STAGE = "eval"


def _checked_signal(signal: str) -> str:
    if signal not in SIGNALS:
        raise ValueError(f"training signal {signal!r}: expected one of {', '.join(SIGNALS)}")
    return signal


def training_path(signal: str) -> tuple[str, ...]:
    """An iteration's stages on the training path of an objective learning from ``signal`` (the pairs
    or advantages stage makes that table), in DAG order. Eval is not on it: it runs beside the loop."""
    return ("generate", "score", _checked_signal(signal), "train", "export")


def iteration_stages(signal: str) -> tuple[str, ...]:
    """Every stage of an iteration (each writes ``metrics/<stage>.json``): the training path, then eval."""
    return (*training_path(signal), EVAL_STAGE)


def training_path_stages() -> tuple[str, ...]:
    """The stages on the training path of any signal, in DAG order (an iteration has one signal stage)."""
    paths = [training_path(signal) for signal in SIGNALS]  # the same length: merged position by position
    return tuple(dict.fromkeys(stage for same_position in zip(*paths) for stage in same_position))


_SHARD_JOB = re.compile(r"(\w+)_\d{2}")


def on_training_path(job: str) -> bool:
    """Whether a job of an iteration (its benchmark's stem: ``train``, ``generate_01``) is on the
    training path: a stage of it, or a shard of one. Eval, grids, tracking and the monitors are not."""
    shard = _SHARD_JOB.fullmatch(job)
    return (shard.group(1) if shard else job) in training_path_stages()


# ------------------------------------------------------------------------------ names within a folder

SAMPLES = "samples.parquet"
LATENTS = "latents.safetensors"
SCORES = "scores.parquet"
EVAL_TABLE = "eval.parquet"
GRID = "grid.png"
EVAL_GRID = "eval_grid.png"
TRAIN_DIR = "train"
TRAIN_STATE_DIR = f"{TRAIN_DIR}/state"
CHECKPOINT_DIR = "checkpoint"
METRICS_DIR = "metrics"
RESCORE_DIR = "rescore"
BENCHMARK_DIR = "benchmark"  # rewardloop benchmark's per-image scores of the folder's model
BENCHMARK_REPORT = "benchmarks.csv"  # report/: the run's benchmark table, once rewardloop benchmark wrote any
SHARDS_DIR = "shards"
SHARD_METRICS = "metrics.json"  # a shard's own record, beside its tables
HEALTH = "health.parquet"
GUARD_VERDICT = "guard.json"  # the guard job's output
GUARD_STOPPED = "guard_stopped.json"  # the verdict of a guard that stopped the run (its job failed: no guard.json)
TRACKING_MARKER = "tracking.json"  # the folder's MLflow tracking job's marker
PREFLIGHT_FIGURES = "preflight_figures.json"  # iteration 0 only
PREFLIGHT_REPORT = "preflight.json"
REPORT = "report"  # the run's report/ folder (and its jobs' logs/report/, benchmarks/report/)
# report/'s files
CURVES = "curves.png"  # reward and loss per iteration
RUN_CONFIG = "config.yaml"  # the run's validated config
HEALTH_FIGURE = "health.png"  # trained vs gold rewards and the image-health monitors
COMPARE_TABLE = "compare.csv"  # a fan-out's comparison (rewardloop compare)
COMPARE_FIGURE = "experiments.png"
OFFLINE_DIR = "offline"  # data.offline_pairs, encoded once: pairs.parquet and latents.safetensors


def signal_table(signal: str) -> str:
    """``pairs.parquet`` or ``advantages.parquet``: what train learns from."""
    return f"{_checked_signal(signal)}.parquet"


def metrics_name(stage: str) -> str:
    """``metrics/<stage>.json``: what a stage (or an eval at a further guidance) measured."""
    return f"{METRICS_DIR}/{stage}.json"


def rescore_name(gold: str, suffix: str = "json") -> str:
    """``rescore/<gold>.json`` (its means) or ``.parquet`` (its rows): a gold reward's rescore of a folder."""
    return f"{RESCORE_DIR}/{gold}.{suffix}"


def benchmark_name(benchmark: str) -> str:
    """``benchmark/<name>.parquet``: the folder's model's per-image scores on a benchmark's prompt set."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", benchmark):
        raise ValueError(f"benchmark name {benchmark!r}: expected letters, digits, '_', '.' or '-'")
    return f"{BENCHMARK_DIR}/{benchmark}.parquet"


def shard_name(stage: str, shard: int | str) -> str:
    """``shards/<stage>_<kk>``: the folder of one shard of a sharded stage (a wildcard string kept as is)."""
    return f"{SHARDS_DIR}/{stage}_{shard:02d}" if isinstance(shard, int) else f"{SHARDS_DIR}/{stage}_{shard}"


# ------------------------------------------------------------------------------ evals at further guidance

_GUIDANCE_PREFIX = "eval_cfg"
_GUIDANCE_NAME = re.compile(rf"{_GUIDANCE_PREFIX}(\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class GuidanceEval:
    """The eval at one further CFG scale (``eval.also_at_guidance``) and its names: ``eval_cfg4.5`` for
    4.5 is its table's stem, its metrics file's and its metrics' prefix (``eval_cfg4.5/reward/mean``)."""

    scale: float

    def __post_init__(self):
        object.__setattr__(self, "scale", float(self.scale))

    @property
    def name(self) -> str:
        return f"{_GUIDANCE_PREFIX}{self.scale:g}"

    @property
    def table(self) -> str:
        return guidance_table(self.name)

    @property
    def metrics(self) -> str:
        return metrics_name(self.name)

    @property
    def metric_prefix(self) -> str:
        return self.name

    @property
    def files(self) -> tuple[str, str]:
        """Its table and metrics file, relative to the folder it evaluates."""
        return self.table, self.metrics

    @classmethod
    def from_name(cls, name: str) -> GuidanceEval:
        """The eval a name (``eval_cfg1``, a metrics file's stem or a column prefix) stands for."""
        match = _GUIDANCE_NAME.fullmatch(name)
        if not match:
            raise ValueError(f"{name!r}: not the name of an eval at a further guidance (expected e.g. {_GUIDANCE_PREFIX}4.5)")
        return cls(float(match.group(1)))

    @classmethod
    def is_name(cls, name: str) -> bool:
        return _GUIDANCE_NAME.fullmatch(name) is not None


def guidance_table(name: str) -> str:
    """The eval table of a further guidance eval's ``name`` (or the {guidance_eval} pattern)."""
    return f"{name}.parquet"


def guidance_evals(scales: Iterable[float] | None) -> tuple[GuidanceEval, ...]:
    """The further evals of ``eval.also_at_guidance``'s scales (None: none), in its order."""
    return tuple(GuidanceEval(scale) for scale in scales or ())


def guidance_wildcard_regex(evals: Iterable[GuidanceEval]) -> str:
    """The {guidance_eval} wildcard's constraint: exactly the configured names (none: a regex that
    matches nothing, so a rule over them never matches a file)."""
    names = [re.escape(e.name) for e in evals]
    return "|".join(names) if names else r"(?!)"


def guidance_evals_in(folder: str | Path) -> tuple[GuidanceEval, ...]:
    """The further evals whose metrics a folder holds (``metrics/eval_cfg*.json``), sorted by name."""
    names = sorted(p.stem for p in (Path(folder) / METRICS_DIR).glob(f"{_GUIDANCE_PREFIX}*.json"))
    return tuple(GuidanceEval.from_name(name) for name in names if GuidanceEval.is_name(name))


# ------------------------------------------------------------------------------ a run's folder


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run folder (``root``: ``results``, or a fan-out run's ``results/<exp>/seed_<s>``).

    Every path is a string ``f"{root}/..."``, as the rules' patterns are; an iteration may be a number or
    a wildcard pattern ("{it}"), a folder a name (``base``, ``iter_003``, "{folder}")."""

    root: str = "results"

    def __post_init__(self):
        object.__setattr__(self, "root", str(self.root))

    def folder(self, name: str) -> str:
        return f"{self.root}/{name}"

    def iteration(self, it: int | str) -> str:
        return self.folder(iteration_name(it))

    @property
    def base(self) -> str:
        return self.folder(BASE)

    def logs_dir(self, folder: str) -> str:
        return f"{self.root}/logs/{folder}"

    def log(self, folder: str | None, job: str) -> str:
        """The log of a job writing into ``folder`` (a folder name: ``base``, ``iter_{it}``, ``report``; None:
        a job of the whole run, such as the model's build)."""
        return f"{self.root}/logs/{job}.log" if folder is None else f"{self.logs_dir(folder)}/{job}.log"

    def benchmarks_dir(self, folder: str) -> str:
        return f"{self.root}/benchmarks/{folder}"

    def benchmark(self, folder: str | None, job: str) -> str:
        """The Snakemake benchmark TSV of a job writing into ``folder`` (a folder name; None: the whole run's)."""
        return f"{self.root}/benchmarks/{job}.tsv" if folder is None else f"{self.benchmarks_dir(folder)}/{job}.tsv"

    @property
    def report_dir(self) -> str:
        return self.folder(REPORT)

    def report(self, name: str) -> str:
        return f"{self.report_dir}/{name}"

    @property
    def tracking_run(self) -> str:
        """The parent MLflow run's marker."""
        return self.folder("tracking/run.json")

    @property
    def offline_dir(self) -> str:
        return self.folder(OFFLINE_DIR)

    @property
    def best_file(self) -> str:
        return self.folder("best.json")

    @property
    def best_link(self) -> str:
        """The link to the best iteration's LoRA folder (export.best)."""
        return self.folder("best")

    def iteration_folders(self) -> list[tuple[int, Path]]:
        """(iteration, folder) of every iteration folder on disk, in order."""
        found = [(parse_folder_name(p.name), p) for p in Path(self.root).glob(ITERATION_GLOB) if p.is_dir()]
        return sorted((it, p) for it, p in found if it is not None)

    def folders(self) -> list[tuple[int, Path]]:
        """(iteration, folder) of base/ (-1) when on disk, then every iteration folder, in order."""
        base = Path(self.base)
        return ([(BASE_ITERATION, base)] if base.is_dir() else []) + self.iteration_folders()


def run_roots(results: str | Path) -> list[Path]:
    """The run folders at or under ``results`` (a run's results/, or each run of a fan-out): those with
    an iteration folder holding an eval table, sorted."""
    return sorted({p.parent.parent for p in Path(results).rglob(f"{ITERATION_GLOB}/{EVAL_TABLE}")})

"""What the stages left, as MLflow values: metric points from metrics JSONs, Parquet tables, train
histories, health tables and rescores; the config as flat params; the span of the work. Pure (files
in, tuples out): no MLflow here.

A point is ``(key, value, timestamp_ms, step)``; its timestamp is derived from its source file's
mtime, so a rerun logs the same rows again, which MLflow deduplicates. Metric names are unique: a
reward column that is a copy of the combined ``reward`` (a single reward of weight 1) is logged once,
as ``reward``; the learning rate once, as the per-step curve ``train/lr``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from rewardloop import results_layout as layout
from rewardloop.artifacts import benchmark_seconds

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
MAX_PARAM_VAL_LENGTH, MAX_KEY_LENGTH = 6000, 250  # mlflow.utils.validation
NOT_LOGGED = {"train/learning_rate"}  # the peak of the `train/lr` curve, which is logged


def flatten(obj, prefix: str = "") -> dict[str, str]:
    """Nested config → {"train.lora.rank": "8", ...}; keys and values cut to MLflow's limits."""
    flat = {}
    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif prefix:
        text = obj if isinstance(obj, str) else json.dumps(obj, default=str)
        flat[prefix[:MAX_KEY_LENGTH]] = text[:MAX_PARAM_VAL_LENGTH]
    return flat


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def mtime_ms(path) -> int:
    return int(Path(path).stat().st_mtime * 1000)


def iter_names(paths: Iterable[str]) -> dict[str, str]:
    """{stage: path} of metrics/<stage>.json paths."""
    return {Path(p).stem: str(p) for p in paths}


def stage_metrics(stage: str, metrics: Mapping) -> dict[str, float]:
    """The numeric entries of a stage's metrics JSON; plain keys get the stage as prefix."""
    out = {}
    for key, value in metrics.items():
        if key in ("iteration", "history") or key in NOT_LOGGED:
            continue
        number = _number(value)
        if number is not None:
            if key == "perf/model_load_time":  # generate and train both load a model
                key = f"perf/model_load_time/{stage}"
            out[key if "/" in key else f"{stage}/{key}"] = number
    return out


def reward_copies(frame: pd.DataFrame) -> set[str]:
    """The ``reward_<name>`` columns equal to ``reward`` row for row (a single reward of weight 1 is
    the combined reward): MLflow gets those values once, under ``reward``."""
    components = [c for c in frame.columns if c.startswith("reward_") and c != "reward_details"]
    if "reward" not in frame:
        return set()
    return {c for c in components if frame[c].astype(float).equals(frame["reward"].astype(float))}


def reward_columns(frame: pd.DataFrame) -> list[str]:
    copies = reward_copies(frame)
    return [c for c in frame.columns
            if c == "reward" or (c.startswith("reward_") and c != "reward_details" and c not in copies)]


def without_copies(points: list, copies: Mapping[str, set[str]]) -> list:
    """``points`` but those of a copied column: ``{"eval": {"reward_color_match"}}`` drops
    ``eval/reward_color_match/mean`` and the other statistics of that column."""
    def kept(key: str) -> bool:
        prefix, _, rest = key.partition("/")
        return rest.split("/")[0] not in copies.get(prefix, ())

    return [p for p in points if kept(p[0])]


def table_points(path, prefix: str, step: int, raw: bool) -> tuple[list, set[str]]:
    """The reward distribution of a scores (``raw``) or eval table as points at ``step``, and its
    copied columns. Eval's mean and std are not among them: eval.json has those already."""
    frame = pd.read_parquet(path).drop(columns=["image", "reward_details"], errors="ignore")
    ts = mtime_ms(path)
    points = [(k, v, ts, step) for k, v in reward_distribution(frame, prefix, raw=raw).items()
              if raw or not k.endswith(("/mean", "/std"))]
    return points, reward_copies(frame)


def reward_distribution(frame: pd.DataFrame, prefix: str, raw: bool) -> dict[str, float]:
    """mean/std/min/max/quantiles of the combined reward and of each component."""
    tag = "raw_" if raw else ""
    out = {}
    for column in reward_columns(frame):
        values = frame[column].astype(float)
        if values.empty:
            continue
        out[f"{prefix}/{column}/{tag}mean"] = float(values.mean())
        out[f"{prefix}/{column}/{tag}std"] = float(values.std(ddof=0))
        out[f"{prefix}/{column}/{tag}min"] = float(values.min())
        out[f"{prefix}/{column}/{tag}max"] = float(values.max())
        for q in QUANTILES:
            out[f"{prefix}/{column}/{tag}q{int(q * 100):02d}"] = float(values.quantile(q))
    return out


def train_curve(history: list[Mapping], iteration: int, steps_per_iteration: int, end_ms: int):
    """[(key, value, timestamp_ms, global_step)] of a train.json history.

    Global step = iteration * steps_per_iteration + step, so the curves of consecutive iterations
    join (when each iteration takes as many steps); timestamps are reconstructed backwards from the
    file's mtime with the per-step times.
    """
    points = []
    remaining = [float(h.get("time") or 0.0) for h in history]
    for i, record in enumerate(history):
        step = iteration * steps_per_iteration + int(record.get("step", i))
        ts = end_ms - int(1000 * sum(remaining[i + 1:]))
        for key, value in record.items():
            if key in ("step",):
                continue
            name = {"lr": "train/lr", "time": "perf/train_step_time"}.get(key, key)
            number = _number(value)
            if number is not None:
                points.append((name, number, max(ts, 0), step))
    return points


def steps_taken(train_metrics: Mapping) -> int:
    """The optimizer steps the train stage took (train.json's ``steps``: its history's length). Not
    ``train.steps``: GRPO, NFT and AWM plan theirs from the data (samples, batch size, inner epochs)."""
    return int(train_metrics.get("steps", len(train_metrics.get("history") or [])))


def iteration_points(iteration: int, metrics_files: Mapping[str, str], tables: Mapping[str, str],
                     benchmarks: Mapping[str, str], steps_per_iteration: int | None = None):
    """(per-iteration points at step=iteration, training-curve points at global steps).

    ``steps_per_iteration``: the global step's stride; None: the optimizer steps the train stage took."""
    points, curve = [], []
    wall_total = 0.0
    for stage, path in metrics_files.items():
        metrics = json.loads(Path(path).read_text())
        ts = mtime_ms(path)
        points += [(k, v, ts, iteration) for k, v in stage_metrics(stage, metrics).items()]
        if stage == "train" and metrics.get("history"):
            stride = steps_taken(metrics) if steps_per_iteration is None else steps_per_iteration
            curve = train_curve(metrics["history"], iteration, stride, ts)
        bench = benchmark_seconds(benchmarks.get(stage, ""))
        if bench is not None:
            points.append((f"perf/wall/{stage}", bench, ts, iteration))
            wall_total += bench if stage != "eval" else 0.0  # eval runs beside the loop
    if wall_total:
        points.append(("perf/wall/iteration", wall_total, mtime_ms(metrics_files["export"]), iteration))
    copies = {}
    for prefix, name in (("rollout", "scores"), ("eval", "eval")):
        if name in tables:
            more, copies[prefix] = table_points(tables[name], prefix, iteration, raw=prefix == "rollout")
            points += more
    return without_copies(points, copies), curve


def base_points(metrics_file, table, benchmark, guidance_metrics: Mapping[str, str] | None = None) -> list:
    """The base model's eval at step -1: its metrics JSON, those of its evals at further guidance
    scales (``{name: metrics JSON}``), its table's reward distribution and its job's wall time."""
    step = layout.BASE_ITERATION
    ts = mtime_ms(metrics_file)
    points = [(k, v, ts, step) for k, v in stage_metrics("eval", json.loads(Path(metrics_file).read_text())).items()]
    for name, path in (guidance_metrics or {}).items():
        metrics = stage_metrics(name, json.loads(Path(path).read_text()))
        points += [(k, v, mtime_ms(path), step) for k, v in metrics.items()]
    more, copies = table_points(table, "eval", step, raw=False)
    points = without_copies(points + more, {"eval": copies})
    bench = benchmark_seconds(benchmark)
    if bench is not None:
        points.append(("perf/wall/eval", bench, ts, step))
    return points


def monitor_points(iteration: int, health_path, gold_paths: Iterable[str]) -> list:
    """health/<source>/<statistic> of a health.parquet and gold/<name>/mean (and rollout_mean) of each
    rescore JSON, at step = iteration (-1: the base model); ``health_path`` None: the gold values alone."""
    import pyarrow.parquet as pq

    points = []
    if health_path:
        ts = mtime_ms(health_path)
        for row in pq.read_table(health_path).to_pylist():
            points += [(f"health/{row['source']}/{k}", float(v), ts, iteration) for k, v in row.items()
                       if k not in ("iteration", "source", "images") and _number(v) is not None]
    return points + [p for path in gold_paths for p in gold_points(path, iteration)]


def gold_points(path, iteration: int) -> list:
    """The gold/... values of a rescore JSON at step = iteration."""
    values = json.loads(Path(path).read_text())
    return [(k, float(v), mtime_ms(path), iteration) for k, v in values.items() if k.startswith("gold/")]


def benchmark_points(rows: Iterable[Mapping], folders: Mapping[str, int], timestamp_ms: int) -> list:
    """`rewardloop benchmark`'s table (benchmark_table.rows) as ``benchmark/<name>/<metric>`` (the mean over
    the images) with ``.../ci95`` and ``.../n``, at step = the model's iteration (``folders``: folder name ->
    iteration, the base model -1), as the base eval sits at -1 and iteration i's at i."""
    points = []
    for row in rows:
        key = f"benchmark/{row['benchmark']}/{row['metric']}"
        for folder, step in folders.items():
            for statistic, suffix in (("mean", ""), ("ci95", "/ci95"), ("n", "/n")):
                value = _number(row.get(f"{folder}_{statistic}"))
                if value is not None:
                    points.append((key + suffix, value, timestamp_ms, step))
    return points


def span_ms(files: Mapping[str, str], benchmarks: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(start, end) in ms of the work that wrote ``files`` ({stage: path}): the earliest mtime less its
    job's wall time (``benchmarks``: {stage: TSV}), the latest mtime."""
    ends = {key: mtime_ms(path) for key, path in files.items()}
    starts = [end - int(1000 * (benchmark_seconds((benchmarks or {}).get(key, "")) or 0)) for key, end in ends.items()]
    return min(starts), max(ends.values())

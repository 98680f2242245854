"""The tracking rules' work (rules/tracking.smk) and `rewardloop rescore`'s: what
the stages wrote (points), logged into the runs (runs), each job's outcome in its marker (markers)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Mapping

from rewardloop import results_layout as layout
from rewardloop.monitors.history import guard_cell
from rewardloop.tracking import points as values
from rewardloop.tracking.errors import retry, retry_stats
from rewardloop.tracking.markers import marking
from rewardloop.tracking.runs import (TAG_GUARD, EVAL_GRID, create_parent_run, extend_parent, find_or_create_child,
                                      get_or_create_experiment, log_artifacts, log_values, read_parent)
from rewardloop.tracking.store import client, tracking_uri


@dataclasses.dataclass(frozen=True)
class Monitors:
    """What the monitors wrote of one folder: its health table, gold rescore JSONs and (an iteration's,
    with the guard on) the guard's verdict."""

    health: str | None = None
    gold: tuple[str, ...] = ()
    verdict: str | None = None


def start_parent_run(config: Mapping, run_json, repo: str | os.PathLike | None = None,
                     start_ms: int | None = None) -> dict:
    """Rule tracking_run: create ONE parent run (starting at ``start_ms``, the workflow run's start,
    when known) and write its id (or the failure) to ``run_json``."""
    uri = tracking_uri()
    experiment = config.get("tracking", {}).get("experiment", "rewardloop")
    marker = {"status": "ok", "tracking_uri": uri, "experiment": experiment}
    with marking(marker, run_json, answered=False) as job:
        mlflow_client = client(uri, first_contact=True)
        job.answered = True
        experiment_id = get_or_create_experiment(mlflow_client, marker["experiment"], uri)
        run_id, name = create_parent_run(mlflow_client, experiment_id, config, repo, start_ms)
        marker.update(experiment_id=experiment_id, run_id=run_id, run_name=name)
        print(f"tracking: parent run {run_id} ({name}) in experiment {marker['experiment']} at {uri}", flush=True)
    return marker


def track_iteration(run_json, iteration: int, metrics_files: Mapping[str, str], tables: Mapping[str, str],
                    grids: Mapping[str, str], benchmarks: Mapping[str, str], steps_per_iteration: int | None,
                    marker_path, monitors: Monitors | None = None) -> dict:
    """Rule track_iteration: log one iteration into its child run (and the curves into the parent), and
    its ``monitors`` (health, gold rewards, guard verdict) as :func:`log_monitors` does; ``steps_per_iteration``
    as for :func:`~rewardloop.tracking.points.iteration_points` (the rule passes None)."""
    marker = {"status": "ok", "iteration": iteration}
    with marking(marker, marker_path):
        parent = read_parent(run_json)
        marker.update(tracking_uri=parent["tracking_uri"], parent_run_id=parent["run_id"],
                      experiment_id=parent["experiment_id"])
        points, curve = values.iteration_points(iteration, metrics_files, tables, benchmarks, steps_per_iteration)
        start_ms, end_ms = values.span_ms(metrics_files, benchmarks)
        mlflow_client = client(parent["tracking_uri"])
        run_id = find_or_create_child(mlflow_client, parent, iteration, start_ms)
        marker["run_id"] = run_id
        retry(mlflow_client.update_run, run_id, status="RUNNING")
        log_values(mlflow_client, run_id, metrics=points + curve, params={"iteration": str(iteration)})
        log_values(mlflow_client, parent["run_id"], metrics=points + curve)
        marker["artifacts"] = log_artifacts(mlflow_client, parent["tracking_uri"], run_id, grids)
        if monitors is not None:
            marker["monitors"] = log_monitors(mlflow_client, parent, iteration, monitors, run_id)
        retry(mlflow_client.set_terminated, run_id, "FINISHED", end_time=end_ms)
        extend_parent(mlflow_client, parent["run_id"], end_ms)
        marker["metrics"] = sorted({p[0] for p in points})
        marker["train_curve"] = {"points": len(curve),
                                 "steps": [min((p[3] for p in curve), default=None),
                                           max((p[3] for p in curve), default=None)]}
        marker["retries"] = retry_stats["retries"]
        print(f"tracking: iteration {iteration} -> run {run_id}: {len(points)} values, "
              f"{len(curve)} curve points, artifacts {marker['artifacts']}", flush=True)
    return marker


def track_base(run_json, metrics_file, table, grid, benchmark, marker_path,
               guidance_metrics: Mapping[str, str] | None = None, monitors: Monitors | None = None) -> dict:
    """Rule track_base: the base model's eval into the parent run at step -1, its evals at the further
    guidance scales of ``eval.also_at_guidance`` (``{name: metrics JSON}``), and its ``monitors``."""
    marker = {"status": "ok", "iteration": layout.BASE_ITERATION}
    with marking(marker, marker_path):
        parent = read_parent(run_json)
        marker.update(tracking_uri=parent["tracking_uri"], run_id=parent["run_id"])
        points = values.base_points(metrics_file, table, benchmark, guidance_metrics)
        mlflow_client = client(parent["tracking_uri"])
        log_values(mlflow_client, parent["run_id"], metrics=points)
        marker["artifacts"] = log_artifacts(mlflow_client, parent["tracking_uri"], parent["run_id"],
                                            {EVAL_GRID: grid}, layout.BASE)
        if monitors is not None:
            marker["monitors"] = log_monitors(mlflow_client, parent, layout.BASE_ITERATION, monitors)
        extend_parent(mlflow_client, parent["run_id"], values.span_ms({"eval": metrics_file, "table": table})[1])
        marker["metrics"] = sorted({p[0] for p in points})
        print(f"tracking: base eval -> parent run {parent['run_id']}: {len(points)} values", flush=True)
    return marker


def log_monitors(mlflow_client, parent: Mapping, iteration: int, monitors: Monitors, child_run_id=None) -> dict:
    """A folder's health and gold rewards into the parent run and the iteration's child run (none for the
    base model, -1); the guard's verdict as the child's tag ``rewardloop.guard``, a breach also on the
    parent as ``iteration N breach: ...``. What was logged, for the job's marker."""
    points = values.monitor_points(iteration, monitors.health, monitors.gold)
    tags = {TAG_GUARD: guard_cell(json.loads(Path(monitors.verdict).read_text()))} if monitors.verdict else {}
    log_values(mlflow_client, parent["run_id"], metrics=points)
    if iteration >= 0:
        child = child_run_id or find_or_create_child(mlflow_client, parent, iteration)
        log_values(mlflow_client, child, metrics=points, tags=tags)
    if tags.get(TAG_GUARD, "ok") != "ok":
        log_values(mlflow_client, parent["run_id"], tags={TAG_GUARD: f"iteration {iteration} {tags[TAG_GUARD]}"})
    print(f"tracking: monitors of {'the base model' if iteration < 0 else f'iteration {iteration}'}: "
          f"{len(points)} values{', guard ' + tags[TAG_GUARD] if tags else ''}", flush=True)
    return {"metrics": sorted({p[0] for p in points}), "tags": tags}


def log_gold(run_json, iteration: int, gold_paths: list[str]) -> None:
    """`rewardloop rescore`: gold/<name>/... of rescore JSONs into a tracked run, as the tracking jobs log them."""
    parent = read_parent(run_json)
    log_monitors(client(parent["tracking_uri"]), parent, iteration, Monitors(gold=tuple(gold_paths)))


def log_benchmarks(run_json, rows: list, folders: Mapping[str, int], table_csv) -> int:
    """`rewardloop benchmark`: the table's means, intervals and image counts into the parent run (step = the
    model's iteration, the base model -1) and the table itself as artifact ``benchmark/benchmarks.csv``;
    the number of values logged."""
    import time

    parent = read_parent(run_json)
    points = values.benchmark_points(rows, folders, int(time.time() * 1000))
    mlflow_client = client(parent["tracking_uri"])
    log_values(mlflow_client, parent["run_id"], metrics=points)
    log_artifacts(mlflow_client, parent["tracking_uri"], parent["run_id"], {layout.BENCHMARK_REPORT: str(table_csv)},
                  "benchmark")
    return len(points)

"""The tracking rules' work (rules/tracking.smk, rules/monitors.smk) and `rewardloop rescore`'s: what
the stages wrote (points), logged into the runs (runs), each job's outcome in its marker (markers)."""

from __future__ import annotations

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
                    marker_path) -> dict:
    """Rule track_iteration: log one iteration into its child run (and the curves into the parent);
    ``steps_per_iteration`` as for :func:`~rewardloop.tracking.points.iteration_points` (the rule passes None)."""
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
               guidance_metrics: Mapping[str, str] | None = None) -> dict:
    """Rule track_base: the base model's eval into the parent run at step -1, and its evals at the
    further guidance scales of ``eval.also_at_guidance`` (``{name: metrics JSON}``)."""
    marker = {"status": "ok", "iteration": layout.BASE_ITERATION}
    with marking(marker, marker_path):
        parent = read_parent(run_json)
        marker.update(tracking_uri=parent["tracking_uri"], run_id=parent["run_id"])
        points = values.base_points(metrics_file, table, benchmark, guidance_metrics)
        mlflow_client = client(parent["tracking_uri"])
        log_values(mlflow_client, parent["run_id"], metrics=points)
        marker["artifacts"] = log_artifacts(mlflow_client, parent["tracking_uri"], parent["run_id"],
                                            {EVAL_GRID: grid}, layout.BASE)
        extend_parent(mlflow_client, parent["run_id"], values.span_ms({"eval": metrics_file, "table": table})[1])
        marker["metrics"] = sorted({p[0] for p in points})
        print(f"tracking: base eval -> parent run {parent['run_id']}: {len(points)} values", flush=True)
    return marker


def _log_to_parent_and_child(parent: Mapping, iteration: int, points: list, child_tags: Mapping) -> None:
    """``points`` into the parent run and the iteration's child run (none for the base model, -1); the
    child gets ``child_tags``, the parent a guard breach as ``iteration N breach: ...``."""
    mlflow_client = client(parent["tracking_uri"])
    log_values(mlflow_client, parent["run_id"], metrics=points)
    if iteration >= 0:
        log_values(mlflow_client, find_or_create_child(mlflow_client, parent, iteration), metrics=points,
                   tags=child_tags)
    if child_tags.get(TAG_GUARD, "ok") != "ok":
        log_values(mlflow_client, parent["run_id"], tags={TAG_GUARD: f"iteration {iteration} {child_tags[TAG_GUARD]}"})


def log_gold(run_json, iteration: int, gold_paths: list[str]) -> None:
    """`rewardloop rescore`: gold/<name>/... of rescore JSONs into a tracked run, as rule track_monitors logs them."""
    points = [p for path in gold_paths for p in values.gold_points(path, iteration)]
    _log_to_parent_and_child(read_parent(run_json), iteration, points, {})


def track_monitors(run_json, iteration: int, health_path, gold_paths: list[str], verdict_path, marker_path) -> dict:
    """Rule track_monitors: a folder's health and gold rewards into the parent run (and the iteration's
    child run), the guard's verdict as tag ``rewardloop.guard`` (on the parent: the last breach)."""
    marker = {"status": "ok", "iteration": iteration}
    with marking(marker, marker_path):
        parent = read_parent(run_json)
        marker.update(tracking_uri=parent["tracking_uri"], parent_run_id=parent["run_id"])
        points = values.monitor_points(iteration, health_path, gold_paths)
        tags = {TAG_GUARD: guard_cell(json.loads(Path(verdict_path).read_text()))} if verdict_path else {}
        _log_to_parent_and_child(parent, iteration, points, tags)
        marker.update(metrics=sorted({p[0] for p in points}), tags=tags)
        print(f"tracking: monitors of {'the base model' if iteration < 0 else f'iteration {iteration}'}: "
              f"{len(points)} values{', guard ' + tags[TAG_GUARD] if tags else ''}", flush=True)
    return marker


def log_benchmarks(run_json, rows: list, folders: Mapping[str, int], table_csv) -> int:
    """`rewardloop benchmark`: the table's means, intervals and image counts into the parent run (step = the
    model's iteration, the base model -1) and the table itself as artifact ``benchmark/benchmarks.csv``;
    the number of values logged."""
    import time

    parent = read_parent(run_json)
    points = values.benchmark_points(rows, folders, int(time.time() * 1000))
    mlflow_client = client(parent["tracking_uri"])
    log_values(mlflow_client, parent["run_id"], metrics=points)
    log_artifacts(mlflow_client, parent["tracking_uri"], parent["run_id"], {"benchmarks.csv": str(table_csv)},
                  "benchmark")
    return len(points)

"""One run's monitors across iterations, read from its files: the table behind `rewardloop summary`'s
guard column, `rewardloop best`, the report's health figure and MLflow's health metrics.

Row per folder (the base model first, iteration -1): ``eval_reward`` (the trained reward on the eval
images), each image-health statistic of the eval images (and ``rollout_<statistic>`` of the
rollouts), ``gold_<name>`` (each gold reward's eval mean) and ``guard`` (ok, stopped or breach, with
the checks).

The guard's verdicts (:func:`rewardloop.monitors.guard.verdict`) are read and written out here only:
``guard_cell`` is how the summary's column and MLflow's ``rewardloop.guard`` tag show one, ``report``
the end-of-run line naming every breach.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Mapping

import pyarrow.parquet as pq

from rewardloop import results_layout as layout
from rewardloop.artifacts import json_or_empty


def folders(results) -> list[tuple[int, Path]]:
    """(iteration, folder) of base/ (-1) and every iteration folder under ``results``, in order."""
    return layout.RunLayout(results).folders()


def health_values(path: Path) -> dict[str, float]:
    """{statistic (eval images), rollout_<statistic>} of a health.parquet; {} when missing."""
    if not path.is_file():
        return {}
    out = {}
    for row in pq.read_table(path).to_pylist():
        prefix = "" if row["source"] == "eval" else f"{row['source']}_"
        out.update({prefix + k: v for k, v in row.items() if k not in ("iteration", "source", "images")})
    return out


def gold_values(folder: Path) -> dict[str, float]:
    """{gold_<name>: eval mean} of the folder's rescore/<name>.json files."""
    out = {}
    for path in sorted((folder / layout.RESCORE_DIR).glob("*.json")):
        mean = json_or_empty(path).get(f"gold/{path.stem}/mean")
        if mean is not None:
            out[f"gold_{path.stem}"] = mean
    return out


def guard_status(folder: Path) -> dict:
    """guard.json, else guard_stopped.json (marked stopped), else {}."""
    verdict = json_or_empty(folder / layout.GUARD_VERDICT)
    if not verdict:
        verdict = json_or_empty(folder / layout.GUARD_STOPPED)
        if verdict:
            verdict["status"] = "stopped"
    return verdict


def guard_checks(verdict: Mapping) -> str:
    """The checks a verdict found breached, comma-separated ("" when none)."""
    return ", ".join(b["check"] for b in verdict.get("breaches", []))


def guard_cell(verdict: Mapping) -> str | None:
    """``ok``, ``breach: <checks>`` or ``stopped: <checks>``; None without a verdict."""
    if not verdict:
        return None
    checks = guard_checks(verdict)
    return verdict["status"] + (f": {checks}" if checks else "")


def report(results, file=None) -> str | None:
    """One loud line on stderr naming every iteration of ``results`` whose guard found a breach."""
    verdicts = [guard_status(folder) for iteration, folder in folders(results) if iteration >= 0]
    breached = [v for v in verdicts if v.get("status") in ("breach", "stopped")]
    if not breached:
        return None
    line = (f"rewardloop: REWARD-HACKING GUARD: breaches in {results} at "
            + "; ".join(f"iteration {v['iteration']}: {guard_checks(v) or 'ok'}" for v in breached)
            + f" (details: {layout.iteration_name('XXX')}/{layout.GUARD_VERDICT} or {layout.GUARD_STOPPED}, "
              f"{layout.REPORT}/{layout.HEALTH_FIGURE})")
    print(line, file=file or sys.stderr)
    return line


def rows(results) -> list[dict]:
    out = []
    for iteration, folder in folders(results):
        metrics = json_or_empty(folder / layout.metrics_name(layout.EVAL_STAGE))
        verdict = guard_status(folder)
        out.append({"iteration": iteration, "eval_reward": metrics.get("eval/reward/mean"),
                    **health_values(folder / layout.HEALTH), **gold_values(folder),
                    "guard": guard_cell(verdict), "breached": verdict.get("status") in ("breach", "stopped")})
    return out

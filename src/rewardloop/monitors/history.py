"""One run's monitors across iterations, read from its files: the table behind `rewardloop summary`'s
guard column, `rewardloop best`, the report's health figure and MLflow's health metrics.

Row per folder (the base model first, iteration -1): ``eval_reward`` (the trained reward on the eval
images), each image-health statistic of the eval images (and ``rollout_<statistic>`` of the
rollouts), ``gold_<name>`` (each gold reward's eval mean) and ``guard`` (ok, stopped or breach, with
the checks).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq

from rewardloop.monitors.guard import STOPPED_FILE, VERDICT_FILE


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def folders(results) -> list[tuple[int, Path]]:
    """(iteration, folder) of base/ (-1) and every iter_XXX/ under ``results``, in order."""
    results = Path(results)
    found = [(int(m.group(1)), p) for p in results.glob("iter_*") if (m := re.fullmatch(r"iter_(\d{3})", p.name))]
    base = [(-1, results / "base")] if (results / "base").is_dir() else []
    return base + sorted(found)


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
    for path in sorted((folder / "rescore").glob("*.json")):
        mean = _json(path).get(f"gold/{path.stem}/mean")
        if mean is not None:
            out[f"gold_{path.stem}"] = mean
    return out


def guard_status(folder: Path) -> dict:
    """guard.json, else guard_stopped.json (marked stopped), else {}."""
    verdict = _json(folder / VERDICT_FILE)
    if not verdict:
        verdict = _json(folder / STOPPED_FILE)
        if verdict:
            verdict["status"] = "stopped"
    return verdict


def guard_cell(verdict: dict) -> str | None:
    if not verdict:
        return None
    checks = ", ".join(b["check"] for b in verdict.get("breaches", []))
    return verdict["status"] + (f": {checks}" if checks else "")


def rows(results) -> list[dict]:
    out = []
    for iteration, folder in folders(results):
        metrics = _json(folder / "metrics/eval.json")
        verdict = guard_status(folder)
        out.append({"iteration": iteration, "eval_reward": metrics.get("eval/reward/mean"),
                    **health_values(folder / "health.parquet"), **gold_values(folder),
                    "guard": guard_cell(verdict), "breached": verdict.get("status") in ("breach", "stopped")})
    return out

"""guard: an iteration's eval images against the base model's (image health and gold rewards).

Writes ``iter_XXX/guard.json`` (see src/rewardloop/monitors/guard.py). A breach is printed loudly; with
``guard.stop`` it fails the job instead, so the next iteration never trains, after writing the
verdict to ``iter_XXX/guard_stopped.json`` (not an output: Snakemake removes a failed job's outputs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Mapping

from rewardloop import results_layout as layout
from rewardloop.artifacts import write_json
from rewardloop.monitors.guard import gold_breaches, health_breaches, verdict
from rewardloop.monitors.history import health_values


class GuardStop(RuntimeError):
    """guard.stop and a breach: the run stops before the next iteration trains."""


def _mean(path, key: str) -> float | None:
    return json.loads(Path(path).read_text()).get(key)


def run(guard_cfg: Mapping, iteration: int, health: tuple[str, str], eval_metrics: tuple[str, str],
        gold: Mapping[str, tuple[str, str]], verdict_path) -> dict:
    """Each pair is (base model's file, iteration's file); ``gold``: {name: its rescore JSONs}."""
    base_health, it_health = (health_values(Path(p)) for p in health)
    reward = tuple(_mean(p, "eval/reward/mean") for p in eval_metrics)
    golds = {name: tuple(_mean(p, f"gold/{name}/mean") for p in pair) for name, pair in gold.items()}
    breaches = health_breaches(guard_cfg, base_health, it_health) + gold_breaches(guard_cfg, reward, golds)
    result = verdict(iteration, breaches, bool(guard_cfg["stop"]))
    stopped = Path(verdict_path).with_name(layout.GUARD_STOPPED)
    for breach in breaches:
        print(f"REWARD-HACKING GUARD, iteration {iteration}: {breach.message} (guard.{breach.check.split(' ')[0]})",
              file=sys.stderr, flush=True)
    if breaches and guard_cfg["stop"]:
        write_json(result, stopped)
        raise GuardStop(f"guard.stop: iteration {iteration} breached {len(breaches)} guard threshold(s) (above); "
                        f"the run stops before iteration {iteration + 1} trains. Every finished file is kept. "
                        f"Look at {Path(verdict_path).parent}/{layout.EVAL_GRID} and {layout.REPORT}/{layout.HEALTH_FIGURE}; to go on "
                        "anyway: --config guard.stop=false")
    stopped.unlink(missing_ok=True)
    write_json(result, verdict_path)
    return result

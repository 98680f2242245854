"""`rewardloop best results/`: the iteration whose checkpoint scores best on a metric, and its LoRA folder.

``--by`` is ``eval/reward/mean`` (iter_XXX/metrics/eval.json) or ``gold/<name>/mean``
(iter_XXX/rescore/<name>.json); with ``--guard``, iterations whose guard found a breach (or stopped the
run) are left out. export.best: rule best writes results/best.json and the link results/best.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rewardloop.artifacts import json_or_empty, write_json
from rewardloop import results_layout as layout
from rewardloop.monitors.history import folders, guard_status

DEFAULT_METRIC = "eval/reward/mean"


def metric_file(folder: Path, metric: str) -> Path:
    if metric == DEFAULT_METRIC:
        return folder / layout.metrics_name(layout.EVAL_STAGE)
    parts = metric.split("/")
    if len(parts) == 3 and parts[0] == "gold" and parts[2] == "mean" and parts[1]:
        return folder / layout.rescore_name(parts[1])
    raise ValueError(f"--by {metric!r}: expected {DEFAULT_METRIC} or gold/<name>/mean")


def choose(results, metric: str = DEFAULT_METRIC, guard: bool = False) -> dict:
    """{iteration, metric, value, lora_dir, candidates, excluded}; raises when no iteration qualifies."""
    results = Path(results)
    if not results.is_dir():
        raise FileNotFoundError(f"{results}: not a folder")
    candidates, excluded = {}, {}
    for iteration, folder in folders(results):
        if iteration < 0 or not (folder / layout.CHECKPOINT_DIR).is_dir():
            continue
        value = json_or_empty(metric_file(folder, metric)).get(metric)
        if value is None:
            continue
        verdict = guard_status(folder)
        if guard and verdict.get("status") in ("breach", "stopped"):
            excluded[iteration] = ", ".join(b["check"] for b in verdict["breaches"])
            continue
        candidates[iteration] = value
    if not candidates:
        if excluded:
            raise ValueError(f"{results}: every exported iteration with {metric} breached the guard "
                             f"(iterations {', '.join(map(str, excluded))}); without --guard: all of them")
        raise ValueError(f"{results}: no exported iteration has {metric}")
    best = max(candidates, key=lambda it: (candidates[it], -it))  # ties: the earlier iteration
    return {"iteration": best, "metric": metric, "value": candidates[best],
            "lora_dir": str(Path(layout.RunLayout(results).iteration(best)) / layout.CHECKPOINT_DIR),
            "candidates": {str(k): v for k, v in candidates.items()},
            "excluded": {str(k): v for k, v in excluded.items()}}


def export_best(results, out_json, guard: bool) -> dict:
    """Rule best: best.json, and results/best, a relative link to the chosen LoRA folder (replaced atomically)."""
    chosen = choose(results, guard=guard)
    link = Path(results) / "best"
    tmp = link.with_name(".best.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(os.path.relpath(chosen["lora_dir"], link.parent), tmp)
    os.replace(tmp, link)
    write_json(chosen, out_json)
    print(f"best: iteration {chosen['iteration']} ({chosen['metric']} {chosen['value']:.4f}) -> {link}", flush=True)
    return chosen


def add_parser(commands) -> None:
    best = commands.add_parser("best", help="name the iteration whose checkpoint scores best, and its LoRA folder")
    best.add_argument("results", nargs="?", default="results", help="a run's results folder (default: %(default)s)")
    best.add_argument("--by", default=DEFAULT_METRIC, metavar="METRIC",
                      help="eval/reward/mean or gold/<name>/mean (default: %(default)s)")
    best.add_argument("--guard", action="store_true",
                      help="leave out iterations whose guard found a breach (default: off)")
    best.add_argument("--json", action="store_true", help="print the choice as JSON (default: off)")
    best.set_defaults(func=_main)


def _main(args) -> None:
    chosen = choose(args.results, args.by, args.guard)
    if args.json:
        print(json.dumps(chosen, indent=2))
    else:
        excluded = "".join(f"\n  left out iteration {it} (guard: {why})" for it, why in chosen["excluded"].items())
        print(f"iteration {chosen['iteration']}: {chosen['metric']} = {chosen['value']:.4f}{excluded}")
        print(chosen["lora_dir"])

"""What the terminal shows when a run ends well (Snakefile ``onsuccess``): what happened and where to look.

One run: its ``rewardloop summary`` table, the guard's verdict, the best checkpoint, and where the
curves, the HTML report and the MLflow UI are. An experiments fan-out: the comparison's headline (each
experiment's last iteration, over its seeds) instead of one table per run, then the same pointers.

Everything is read from the files the run left, by the functions behind ``rewardloop summary``,
``compare`` and ``best``, so :func:`text` is a pure function of the folders. Snakemake calls
``onsuccess`` only when jobs ran: a rerun with "Nothing to be done" prints nothing (Snakemake 9
returns before its hooks); ``rewardloop summary results/`` shows the same table at any time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from rewardloop.reports import best, compare, summary
from rewardloop import results_layout as layout
from rewardloop.artifacts import json_or_empty
from rewardloop.monitors.history import folders, guard_cell, guard_status

BREACHED = ("breach", "stopped")  # the guard verdicts that are not "ok"
LABEL_WIDTH = 12  # the pointer lines' labels, so that their values line up
REPORT_COMMAND = "make report (snakemake --report report.html, with the run's --configfile)"


def _line(label: str, value: str) -> str:
    return f"{label + ':':<{LABEL_WIDTH}} {value}"


def guard_verdict(results) -> str:
    """``ok at iterations 0, 1``, or every iteration whose guard found a breach (or stopped the run)
    with its checks; ``no verdict`` when no guard ran."""
    verdicts = {it: v for it, folder in folders(results) if it >= 0 and (v := guard_status(folder))}
    if not verdicts:
        return "no verdict (guard.enabled is off)"
    flagged = [f"iteration {it}: {guard_cell(v)}" for it, v in verdicts.items() if v.get("status") in BREACHED]
    if not flagged:
        return f"ok at iteration{'s' if len(verdicts) > 1 else ''} {', '.join(map(str, verdicts))}"
    where = Path(results) / layout.iteration_name("XXX") / layout.GUARD_VERDICT
    return "; ".join(flagged) + f" (details: {where})"


def best_checkpoint(results) -> str:
    """The iteration rule best linked (``export.best``), else the one ``rewardloop best --guard`` names."""
    run = layout.RunLayout(results)
    chosen, link = json_or_empty(run.best_file), f"{run.best_link} -> "
    if not chosen:
        link = ""
        try:
            chosen = best.choose(results, guard=True)
        except (ValueError, FileNotFoundError) as exc:  # nothing exported, or every iteration breached
            return str(exc)
    return f"iteration {chosen['iteration']} ({chosen['metric']} {chosen['value']:.4f}): {link}{chosen['lora_dir']}"


def mlflow_lines(results) -> list[str]:
    """Where the MLflow UI shows the run(s) under ``results``; none when nothing was tracked (tracking
    off, or failed: tracking's own end-of-run line says so)."""
    from rewardloop.tracking import browse

    if not browse.tracked_experiments(results):
        return []
    return [_line("MLflow UI", "make mlflow-ui (a tracking server: its own UI)"),
            *(_line("MLflow", line.removeprefix("MLflow: ")) for line in browse.ui_lines(results))]


def run_text(results) -> str:
    """The end-of-run block of one run's results folder."""
    run = layout.RunLayout(results)
    return "\n".join([
        f"== rewardloop: the run in {results} finished ==", summary.render(results), "",
        _line("guard", guard_verdict(results)),
        _line("best", best_checkpoint(results)),
        _line("curves", run.report(layout.CURVES)),
        _line("report", REPORT_COMMAND),
        *mlflow_lines(results),
    ])


def _experiments(run_folders: Sequence) -> dict[str, list[int]]:
    """{experiment: seeds} of a fan-out's run folders (``<results>/<experiment>/seed_<s>``)."""
    out: dict[str, list[int]] = {}
    for folder in map(Path, run_folders):
        out.setdefault(folder.parent.name, []).append(int(folder.name.removeprefix("seed_")))
    return out


def fanout_text(results, run_folders: Sequence) -> str:
    """The end-of-run block of an experiments fan-out: each experiment's last compared iteration (mean
    over seeds, its 95 % interval and gain over the base), then the guard's breaches of any run."""
    run = layout.RunLayout(results)
    last = {row["experiment"]: row for row in compare.rows(results, only=_experiments(run_folders))}
    flagged = [f"{folder}: {verdict}" for folder in run_folders
               if not (verdict := guard_verdict(folder)).startswith(("ok", "no verdict"))]
    return "\n".join([
        f"== rewardloop: {len(run_folders)} runs in {results} finished; each experiment's last iteration ==",
        compare.format_table(list(last.values())), "",
        _line("table", f"rewardloop compare {results} ({run.report(layout.COMPARE_TABLE)}, {run.report(layout.COMPARE_FIGURE)})"),
        _line("guard", "; ".join(flagged) if flagged else "no breach in any run"),
        _line("best", f"rewardloop best {results}/<experiment>/seed_<s> --guard"),
        _line("report", REPORT_COMMAND),
        *mlflow_lines(results),
    ])


def text(run_folders: Sequence, fanout_results=None) -> str:
    """The block for the Snakefile's RUN_FOLDERS: one run's, or (``fanout_results``, the fan-out's
    results folder) the experiments'."""
    if fanout_results is not None:
        return fanout_text(fanout_results, run_folders)
    return "\n\n".join(run_text(folder) for folder in run_folders)


def show(run_folders: Sequence, fanout_results=None, file=None) -> None:
    """Print :func:`text` on stdout. Never raises: the run's exit status stays that of its jobs."""
    try:
        block = text(run_folders, fanout_results)
    except Exception as exc:  # noqa: BLE001 - a summary must not change how the run ends
        block = f"rewardloop: no end-of-run summary ({type(exc).__name__}: {exc}); see `rewardloop summary`"
    print("\n" + block, file=file or sys.stdout, flush=True)

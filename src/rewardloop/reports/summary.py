"""`rewardloop summary results/`: one line per iteration (the base model's eval first) and the curves figure.

Reads only what the stages and Snakemake leave: ``iter_XXX/metrics/<stage>.json`` and
``benchmarks/iter_XXX/<stage>.tsv`` (wall seconds of each job). Missing files give empty cells, so
it works on a run that is still going.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from rewardloop import results_layout as layout
from rewardloop.artifacts import benchmark_seconds, json_or_empty
from rewardloop.monitors.history import guard_cell, guard_status
from rewardloop.reports.text_tables import add_table_command, aligned, csv_text

COLUMNS_HELP = """One line per iteration, the base model's eval first (iteration -1, "base" in the table):
  reward_mean, reward_std  the combined rollout reward of the iteration
  eval_mean                the mean eval reward of the iteration's model
  pairs                    DPO pairs; final_loss, final_acc: the last training step's loss and accuracy
  total_s                  wall seconds of the stages' jobs on the training path (not eval)
  <stage>_s                (--timings, and always in CSV and JSON) wall seconds of each stage's job
  guard                    the reward-hacking guard's verdict: ok, breach or stopped, with the thresholds passed
The table fits 100 columns (a long guard verdict is cut, ending in ...) unless --timings widens it."""
TABLE_WIDTH = 100


def stages() -> tuple[str, ...]:
    """The stages of the summary's ``<stage>_s`` columns: those on the training paths, then eval."""
    return (*layout.training_path_stages(), layout.EVAL_STAGE)


def columns(timings: bool = True) -> list[str]:
    """The summary's columns, those of CSV and JSON; ``timings=False``: the table's default, without
    the ``<stage>_s`` columns."""
    return ["iteration", "reward_mean", "reward_std", "eval_mean", "pairs", "final_loss", "final_acc",
            *([f"{stage}_s" for stage in stages()] if timings else []), "total_s", "guard"]


def rows(results) -> list[dict]:
    """The summary rows: base first (iteration -1), then every iteration folder in order."""
    results = Path(results)
    if not results.is_dir():
        raise FileNotFoundError(f"{results}: not a folder")
    run = layout.RunLayout(results)
    out = []
    base = json_or_empty(Path(run.base) / layout.metrics_name(layout.EVAL_STAGE))
    if base:
        row = dict.fromkeys(columns())
        row.update(iteration=layout.BASE_ITERATION, eval_mean=base.get("eval/reward/mean"),
                   eval_s=benchmark_seconds(Path(run.benchmark(layout.BASE, layout.EVAL_STAGE)))
                   or base.get("perf/eval_time"))
        row["total_s"] = row["eval_s"]
        out.append(row)
    for it, folder in run.iteration_folders():
        metrics = {stage: json_or_empty(folder / layout.metrics_name(stage)) for stage in stages()}
        history = metrics["train"].get("history") or []
        row = dict.fromkeys(columns())
        row.update(
            iteration=it,
            reward_mean=metrics["score"].get("rollout/reward/raw_mean"),
            reward_std=metrics["score"].get("rollout/reward/raw_std"),
            eval_mean=metrics["eval"].get("eval/reward/mean"),
            pairs=metrics["pairs"].get("pairs/count"),
            final_loss=history[-1].get("train/loss") if history else metrics["train"].get("train/loss/last_quarter"),
            final_acc=history[-1].get("train/implicit_acc") if history else None,
        )
        fallback = {"generate": "perf/rollout_time", "score": "perf/score_time", "train": "perf/train_time",
                    "eval": "perf/eval_time"}
        for stage in stages():
            seconds = benchmark_seconds(Path(run.benchmark(folder.name, stage)))
            if seconds is None and stage in fallback:
                seconds = metrics[stage].get(fallback[stage])
            row[f"{stage}_s"] = seconds
        loop = [row[f"{s}_s"] for s in layout.training_path_stages() if row[f"{s}_s"] is not None]
        row["total_s"] = sum(loop) if loop else None
        row["guard"] = guard_cell(guard_status(folder))
        out.append(row)
    if not out:
        raise FileNotFoundError(f"{results}: no {layout.BASE}/ or {layout.iteration_name('XXX')}/ metrics found")
    return out


def _cell(value, column) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if column == "iteration":
        return layout.BASE if value == layout.BASE_ITERATION else str(value)
    if isinstance(value, float):
        return f"{value:.1f}" if column.endswith("_s") else f"{value:.4f}"
    return str(value)


def format_table(table: list[dict], timings: bool = False) -> str:
    """An aligned table with the names of the CSV and JSON (``iteration`` -1 reads ``base``). Without
    ``timings`` it fits TABLE_WIDTH columns: the guard verdict, last, is cut to the width left."""
    names = columns(timings)
    cells = [[_cell(row[column], column) for column in names] for row in table]
    if not timings:
        others = [max(len(name), *(len(line[i]) for line in cells)) + 2 for i, name in enumerate(names[:-1])]
        room = max(len(names[-1]), TABLE_WIDTH - sum(others))
        for line in cells:
            if len(line[-1]) > room:
                line[-1] = line[-1][: room - 3] + "..."
    return aligned(names, cells)


def format_csv(table: list[dict]) -> str:
    return csv_text(table, columns()).rstrip("\n")


def render(results, fmt: str = "table", timings: bool = False) -> str:
    """The summary as a table (``timings``: with each stage's seconds), CSV or JSON (every column)."""
    table = rows(results)
    if fmt == "csv":
        return format_csv(table)
    if fmt == "json":
        return json.dumps(table, indent=2)
    return format_table(table, timings)


def add_parser(commands) -> None:
    add_table_command(commands, "summary", render, help="one line per iteration: rewards, eval, pairs, loss, wall times",
                      results_help="the workflow's results folder (default: results)", description=COLUMNS_HELP)
    command = commands.choices["summary"]
    command.add_argument("--timings", action="store_true",
                         help="the table with each stage's wall seconds (<stage>_s), wider than 100 columns")
    command.add_argument("--benchmarks", action="store_true",
                         help="the benchmark table instead (rewardloop benchmark's results: per benchmark and "
                              "metric, base vs checkpoints, mean ± 95 %% interval and images)")
    command.set_defaults(func=_main)


def _main(args) -> None:
    if args.benchmarks:
        from rewardloop.reports.benchmark_table import render as render_benchmarks

        print(render_benchmarks(args.results, args.format))
    else:
        print(render(args.results, args.format, args.timings))


# ------------------------------------------------------------------------------------- curves.png


def plot_curves(base_eval, score_files, eval_files, train_files, steps_per_iteration: int, out_path) -> None:
    """Reward per iteration (rollout mean ± std, eval mean; base at -1) and the training curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rewardloop.artifacts import atomic_path

    its = list(range(len(score_files)))
    scores = [json_or_empty(p) for p in score_files]
    evals = [json_or_empty(p) for p in eval_files]
    base = json_or_empty(base_eval)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), constrained_layout=True)
    mean = [s.get("rollout/reward/raw_mean", float("nan")) for s in scores]
    std = [s.get("rollout/reward/raw_std", 0.0) for s in scores]
    top.errorbar(its, mean, yerr=std, marker="o", capsize=3, label="rollout mean ± std")
    eval_x = [-1] + its
    eval_y = [base.get("eval/reward/mean", float("nan"))] + [e.get("eval/reward/mean", float("nan")) for e in evals]
    top.plot(eval_x, eval_y, marker="s", label="eval mean (base = -1)")
    extra = sorted({k for e in [base, *evals] for k in e if k.startswith("eval/reward_") and k.endswith("/mean")})
    for key in extra:
        top.plot(eval_x, [e.get(key, float("nan")) for e in [base, *evals]], linestyle="--", marker=".",
                 label=key.removeprefix("eval/").removesuffix("/mean"))
    top.set_xlabel("iteration")
    top.set_ylabel("reward")
    top.set_xticks(eval_x)
    top.set_title("reward per iteration")
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    steps, loss, acc = [], [], []
    for it, path in enumerate(train_files):
        for i, record in enumerate(json_or_empty(path).get("history") or []):
            steps.append(it * steps_per_iteration + int(record.get("step", i)))
            loss.append(record.get("train/loss", float("nan")))
            acc.append(record.get("train/implicit_acc", float("nan")))
    bottom.plot(steps, loss, label="train/loss")
    for it in its[1:]:
        bottom.axvline(it * steps_per_iteration, color="grey", alpha=0.3, linewidth=0.8)
    bottom.set_xlabel("global optimizer step")
    bottom.set_ylabel("loss")
    bottom.grid(alpha=0.3)
    if any(not math.isnan(a) for a in acc):
        twin = bottom.twinx()
        twin.plot(steps, acc, color="tab:green", alpha=0.6, label="train/implicit_acc")
        twin.set_ylabel("implicit accuracy")
        twin.legend(loc="upper right", fontsize=8)
    bottom.legend(loc="upper left", fontsize=8)
    bottom.set_title("training")
    with atomic_path(out_path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)

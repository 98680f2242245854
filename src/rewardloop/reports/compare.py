"""`rewardloop compare results/`: the experiments of a fan-out side by side, over their seeds.

Per experiment and iteration (the base model's eval first, as iteration -1): the held-out eval reward
as the mean over seeds with a 95 % confidence interval (Student's t over the seeds' means), its gain
over the base, and what it cost up to then: rollouts consumed (images sampled for training), train
seconds (the train jobs) and wall seconds (the jobs on the training path: generate, score, pairs or
advantages, train, export; eval runs beside the loop and is left out), each the mean over seeds.

With ``eval.also_at_guidance``, each further eval (``eval_cfg1``: CFG 1) gets its own columns beside the
main eval's: ``eval_cfg1_mean``, ``eval_cfg1_ci95``, ``eval_cfg1_gain`` (over the base at that guidance).

Reads only what the runs leave: ``<experiment>/seed_<s>/iter_XXX/metrics/{eval,generate}.json``, the
shared ``base/metrics/eval.json`` and the job benchmarks (``benchmarks/iter_XXX/*.tsv``, as
``rewardloop summary``), so it works while runs are still going (missing iterations are left out).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from statistics import mean, stdev
from typing import Iterable, Mapping

from rewardloop import results_layout as layout
from rewardloop.artifacts import benchmark_seconds, json_or_empty
from rewardloop.reports.text_tables import add_table_command, aligned, csv_text

COLUMNS = ["experiment", "iteration", "seeds", "eval_mean", "eval_ci95", "eval_gain", "eval_min", "eval_max",
           "rollouts", "train_s", "wall_s"]
GUIDANCE_STATISTICS = ("mean", "ci95", "gain")  # the columns of each further eval (eval.also_at_guidance)


def ci95(values: list[float]) -> float | None:
    """Half-width of the 95 % confidence interval of the mean (Student's t); None below two values."""
    if len(values) < 2:
        return None
    from scipy.stats import t

    return float(t.ppf(0.975, len(values) - 1) * stdev(values) / math.sqrt(len(values)))


def find_runs(results, only: Mapping[str, Iterable[int]] | None = None) -> dict[str, dict[int, Path]]:
    """{experiment: {seed: run folder}} of a fan-out's results folder, experiments and seeds sorted.
    ``only`` ({experiment: seeds}): those runs alone (the workflow's config; a folder left from an
    experiment or seed since removed from it is not compared)."""
    results = Path(results)
    if not results.is_dir():
        raise FileNotFoundError(f"{results}: not a folder")
    runs: dict[str, dict[int, Path]] = {}
    for folder in sorted(results.glob("*/seed_*")):
        m = re.fullmatch(r"seed_(\d+)", folder.name)
        if m and folder.is_dir() and (only is None or int(m.group(1)) in only.get(folder.parent.name, ())):
            runs.setdefault(folder.parent.name, {})[int(m.group(1))] = folder
    if not runs:
        raise FileNotFoundError(f"{results}: no <experiment>/seed_<s>/ folders (is it an experiments fan-out's "
                                f"results folder? a single run's is read by `rewardloop summary`)")
    return {name: dict(sorted(seeds.items())) for name, seeds in sorted(runs.items())}


def _job_seconds(folder: Path, it: int) -> tuple[float, float]:
    """(train seconds, training-path seconds) of iteration ``it`` of a run, from its job benchmarks (the
    jobs off the training path, or watching it, such as eval and the monitors, left out)."""
    train, path = 0.0, 0.0
    benchmarks = Path(layout.RunLayout(folder).benchmarks_dir(layout.iteration_name(it)))
    for tsv in sorted(benchmarks.glob("*.tsv")):
        if not layout.on_training_path(tsv.stem):
            continue
        seconds = benchmark_seconds(tsv) or 0.0
        path += seconds
        train += seconds if tsv.stem == "train" else 0.0
    return train, path


def guidance_eval_names(results: Path) -> list[str]:
    """The further evals of the shared base (``base/metrics/eval_cfg1.json`` and the like), sorted."""
    return [evaluation.name for evaluation in layout.guidance_evals_in(layout.RunLayout(results).base)]


def columns(guidance_names=()) -> list[str]:
    extra = [f"{name}_{statistic}" for name in guidance_names for statistic in GUIDANCE_STATISTICS]
    at = COLUMNS.index("eval_max") + 1
    return COLUMNS[:at] + extra + COLUMNS[at:]


def _guidance_means(folder: Path, names) -> dict[str, float | None]:
    evals = [layout.GuidanceEval.from_name(name) for name in names]
    return {e.name: json_or_empty(folder / e.metrics).get(f"{e.metric_prefix}/reward/mean") for e in evals}


def _metrics_file(run: layout.RunLayout, it: int, stage: str) -> str:
    return f"{run.iteration(it)}/{layout.metrics_name(stage)}"


def run_curve(folder: Path, guidance_names=()) -> list[dict]:
    """One run's finished iterations in order: eval mean (and the further evals' means, None while
    one is missing) and the cumulative cost up to each."""
    points, rollouts, train_s, wall_s = [], 0, 0.0, 0.0
    run = layout.RunLayout(folder)
    it = 0
    while (eval_metrics := json_or_empty(Path(_metrics_file(run, it, "eval")))).get("eval/reward/mean") is not None:
        rollouts += int(json_or_empty(Path(_metrics_file(run, it, "generate"))).get("samples") or 0)
        train, path = _job_seconds(folder, it)
        train_s, wall_s = train_s + train, wall_s + path
        points.append({"iteration": it, "eval_mean": eval_metrics["eval/reward/mean"], "rollouts": rollouts,
                       "train_s": train_s, "wall_s": wall_s,
                       "guidance": _guidance_means(Path(run.iteration(it)), guidance_names)})
        it += 1
    return points


def _row(experiment: str, iteration: int, seeds: int, evals: list[float], base: float | None,
         guidance: dict[str, tuple[list, float | None]], **costs) -> dict:
    """``guidance``: {further eval: (its seeds' means, its base mean)}."""
    row = dict.fromkeys(columns(guidance))
    center = mean(evals)
    row.update(experiment=experiment, iteration=iteration, seeds=seeds, eval_mean=center, eval_ci95=ci95(evals),
               eval_gain=None if base is None else center - base, eval_min=min(evals), eval_max=max(evals), **costs)
    for name, (values, base_value) in guidance.items():
        if values and None not in values:
            row[f"{name}_mean"], row[f"{name}_ci95"] = mean(values), ci95(values)
            row[f"{name}_gain"] = None if base_value is None else mean(values) - base_value
    return row


def rows(results, only: Mapping[str, Iterable[int]] | None = None) -> list[dict]:
    """The comparison rows: per experiment, the base model (iteration -1) then every iteration that all
    of its seeds have finished (a seed that is behind would bias the mean toward the others).
    ``only``: as for :func:`find_runs`."""
    results = Path(results)
    runs = find_runs(results, only)
    base_folder = Path(layout.RunLayout(results).base)
    base = json_or_empty(base_folder / layout.metrics_name(layout.EVAL_STAGE)).get("eval/reward/mean")
    names = guidance_eval_names(results)
    base_guidance = _guidance_means(base_folder, names)
    out = []
    for experiment, seeds in runs.items():
        curves = [run_curve(folder, names) for folder in seeds.values()]
        if base is not None:
            guidance = {name: ([value], value) for name, value in base_guidance.items()}
            out.append(_row(experiment, -1, len(curves), [base], base, guidance, rollouts=0, train_s=0.0, wall_s=0.0))
        for it in range(min(len(curve) for curve in curves)):
            points = [curve[it] for curve in curves]
            guidance = {name: ([p["guidance"][name] for p in points], base_guidance[name]) for name in names}
            out.append(_row(experiment, it, len(points), [p["eval_mean"] for p in points], base, guidance,
                            **{key: mean(p[key] for p in points) for key in ("rollouts", "train_s", "wall_s")}))
    return out


def table_columns(table: list[dict]) -> list[str]:
    """The columns of ``rows``' table: COLUMNS and, after the eval's, those of each further eval."""
    return list(table[0]) if table else list(COLUMNS)


def _cell(value, column: str) -> str:
    if value is None:
        return "-"
    if column == "iteration":
        return layout.BASE if value == layout.BASE_ITERATION else str(value)
    if column.endswith("_s"):
        return f"{value:.1f}"
    if column == "rollouts":
        return f"{value:.0f}"
    if isinstance(value, float):
        return f"{value:+.4f}" if column.endswith("_gain") else f"{value:.4f}"
    return str(value)


def format_table(table: list[dict]) -> str:
    """An aligned table with the names of the CSV and JSON (``iteration`` -1 reads ``base``)."""
    names = table_columns(table)
    return aligned(names, [[_cell(row[column], column) for column in names] for row in table])


def format_csv(table: list[dict]) -> str:
    return csv_text(table, table_columns(table))


def render(results, fmt: str = "table") -> str:
    table = rows(results)
    if fmt == "csv":
        return format_csv(table).rstrip("\n")
    if fmt == "json":
        return json.dumps(table, indent=2)
    return format_table(table)


def plot(table: list[dict], out_path) -> None:
    """Eval reward per experiment (mean over seeds, 95 % band) against iteration, rollouts, wall seconds;
    one row of panels per eval (the main one, then each of eval.also_at_guidance)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rewardloop.artifacts import atomic_path

    evals = ["eval"] + [c[: -len("_mean")] for c in table_columns(table)
                        if c.endswith("_mean") and layout.GuidanceEval.is_name(c[: -len("_mean")])]
    axes_of = (("iteration", "iteration (base = -1)"), ("rollouts", "rollouts consumed"),
               ("wall_s", "training-path job seconds"))
    fig, grid = plt.subplots(len(evals), 3, figsize=(15, 4.5 * len(evals)), constrained_layout=True,
                             sharey="row", squeeze=False)
    for name, axes in zip(evals, grid):
        for experiment in dict.fromkeys(row["experiment"] for row in table):
            points = [row for row in table if row["experiment"] == experiment and row[f"{name}_mean"] is not None]
            if not points:
                continue
            y = [row[f"{name}_mean"] for row in points]
            half = [row[f"{name}_ci95"] or 0.0 for row in points]
            for ax, (key, _) in zip(axes, axes_of):
                x = [row[key] for row in points]
                (line,) = ax.plot(x, y, marker="o", label=f"{experiment} ({points[-1]['seeds']} seeds)")
                ax.fill_between(x, [a - h for a, h in zip(y, half)], [a + h for a, h in zip(y, half)],
                                color=line.get_color(), alpha=0.2)
        for ax, (_, label) in zip(axes, axes_of):
            ax.set_xlabel(label)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("held-out eval reward" if name == "eval" else f"held-out eval reward, {name[len('eval_'):]}")
        axes[0].legend(fontsize=8)
    fig.suptitle("eval reward: mean over seeds, 95% confidence band")
    with atomic_path(out_path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def add_parser(commands) -> None:
    add_table_command(commands, "compare", render, results_help="the fan-out's results folder (default: results)",
                      help="an experiments fan-out side by side: eval mean ± 95%% CI over seeds, rollouts, seconds")

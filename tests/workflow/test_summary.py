"""`rewardloop summary`: per-iteration table from the metrics JSONs and benchmarks, on a real tiny run;
and that run's tables opened as users open them (🤗 datasets, the docs' pandas merge)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rewardloop import results_layout
from rewardloop.reports import summary
from workflow_helpers import snakemake, tiny_overlay, write_overlay

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def results(tmp_path_factory, tiny_model, repo_root) -> Path:
    """One tiny iteration of the real workflow (no MLflow): what `summary` reads."""
    work = tmp_path_factory.mktemp("summary-run")
    write_overlay(work, tiny_overlay(
        tiny_model, iterations=1, generate={"prompts_per_iteration": 4, "images_per_prompt": 2, "steps": 2},
        train={"steps": 3, "checkpointing_steps": 3}, eval={"steps": 2}, tracking={"enabled": False},
    ))
    snakemake(work)
    assert not (work / "results/tracking").exists()  # tracking.enabled: false adds no tracking job
    return work / "results"


@pytest.mark.workflow
def test_summary_rows_of_a_real_run(results):
    rows = summary.rows(results)
    assert [r["iteration"] for r in rows] == [-1, 0]
    base, it0 = rows
    assert base["eval_mean"] == json.loads((results / "base/metrics/eval.json").read_text())["eval/reward/mean"]
    score = json.loads((results / "iter_000/metrics/score.json").read_text())
    train = json.loads((results / "iter_000/metrics/train.json").read_text())
    assert it0["reward_mean"] == score["rollout/reward/raw_mean"] and it0["reward_std"] == score["rollout/reward/raw_std"]
    assert it0["final_loss"] == train["history"][-1]["train/loss"]
    assert it0["pairs"] == json.loads((results / "iter_000/metrics/pairs.json").read_text())["pairs/count"]
    path = results_layout.training_path("pairs")  # DPO's
    assert all(it0[f"{s}_s"] is not None and it0[f"{s}_s"] >= 0 for s in (*path, "eval"))
    assert it0["advantages_s"] is None and it0["total_s"] == pytest.approx(sum(it0[f"{s}_s"] for s in path))


@pytest.mark.workflow
@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_summary_cli_formats(results, fmt):
    out = subprocess.run([str(BIN / "rewardloop"), "summary", str(results), "--format", fmt],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    if fmt == "table":  # the names of the CSV and JSON, in their order
        lines = out.stdout.splitlines()
        table_columns = summary.columns(timings=False)
        assert lines[0].split() == table_columns and lines[2].split()[0] == "base" and lines[3].split()[0] == "0"
        assert max(map(len, lines)) <= summary.TABLE_WIDTH
        cells = dict(zip(table_columns, lines[3].split()))
        assert float(cells["reward_mean"]) == pytest.approx(summary.rows(results)[1]["reward_mean"], abs=1e-4)
    elif fmt == "csv":
        table = list(csv.DictReader(io.StringIO(out.stdout)))
        assert [r["iteration"] for r in table] == ["-1", "0"] and table[0]["reward_mean"] == ""
    else:
        table = json.loads(out.stdout)
        assert [r["iteration"] for r in table] == [-1, 0] and all(list(r) == summary.columns() for r in table)


@pytest.mark.workflow
def test_report_renders(results, repo_root):
    """`snakemake --report` on the finished run (an HTML file with the curves and grids)."""
    work = results.parent
    cmd = [str(BIN / "snakemake"), "-s", str(repo_root / "Snakefile"), "--directory", str(work), "--configfile",
           str(work / "test.yaml"), "--report", str(work / "report.html")]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-4000:]
    html = (work / "report.html").read_text()
    assert "curves.png" in html and "eval_grid.png" in html and "config.yaml" in html


@pytest.mark.workflow
def test_tables_open_in_datasets_and_merge_without_duplicate_columns(results, tmp_path):
    from datasets import load_dataset
    from PIL import Image

    for rel in ("iter_000/samples.parquet", "iter_000/eval.parquet", "base/eval.parquet"):
        dataset = load_dataset("parquet", data_files=str(results / rel), split="train", cache_dir=str(tmp_path))
        image = dataset[0]["image"]  # no cast_column("image", Image())
        assert isinstance(image, Image.Image) and image.size[0] > 0, rel
    scores = pd.read_parquet(results / "iter_000/scores.parquet")
    samples = pd.read_parquet(results / "iter_000/samples.parquet")
    assert set(scores.iteration) == {0} and set(pd.read_parquet(results / "iter_000/eval.parquet").iteration) == {0}
    assert set(pd.read_parquet(results / "base/eval.parquet", columns=["iteration"]).iteration) == {-1}
    best = scores.merge(samples).nlargest(4, "reward")  # docs/artifacts.md, as written there
    assert not [c for c in best.columns if c.endswith(("_x", "_y"))] and {"reward", "image", "eta"} <= set(best.columns)
    assert len(scores.merge(samples)) == len(scores) == len(samples)


def test_summary_handles_missing_files_and_benchmarks(tmp_path):
    (tmp_path / "iter_000/metrics").mkdir(parents=True)
    (tmp_path / "iter_000/metrics/score.json").write_text('{"rollout/reward/raw_mean": 1.5, "rollout/reward/raw_std": 0.5}')
    (tmp_path / "benchmarks/iter_000").mkdir(parents=True)
    (tmp_path / "benchmarks/iter_000/train.tsv").write_text("s\th:m:s\n12.5\t0:00:12\n")
    (tmp_path / "iter_000/metrics/train.json").write_text('{"perf/train_time": 9.0, "history": []}')
    rows = summary.rows(tmp_path)
    assert len(rows) == 1 and rows[0]["reward_mean"] == 1.5 and rows[0]["train_s"] == 12.5
    assert rows[0]["eval_mean"] is None and rows[0]["total_s"] == 12.5
    header, _, row = summary.render(tmp_path).splitlines()
    assert dict(zip(header.split(), row.split()))["reward_std"] == "0.5000"
    with pytest.raises(FileNotFoundError):
        summary.rows(tmp_path / "nope")


def test_total_s_counts_the_advantages_stage_of_an_advantage_objective(tmp_path):
    """GRPO, NFT and AWM learn from advantages.parquet where DPO learns from pairs.parquet: the stage
    that makes it is on their training path, and in the iteration's total."""
    benchmarks = tmp_path / "benchmarks/iter_000"
    benchmarks.mkdir(parents=True)
    seconds = {"generate": 10.0, "score": 5.0, "advantages": 2.0, "train": 30.0, "export": 1.0, "eval": 7.0}
    for stage, s in seconds.items():
        (benchmarks / f"{stage}.tsv").write_text(f"s\th:m:s\n{s}\t0:00:{s:02.0f}\n")
    (tmp_path / "iter_000/metrics").mkdir(parents=True)
    (tmp_path / "iter_000/metrics/advantages.json").write_text('{"advantages/samples": 8}')
    (row,) = summary.rows(tmp_path)
    assert row["total_s"] == 48.0  # all but eval
    assert row["advantages_s"] == 2.0 and row["pairs_s"] is None and row["eval_s"] == 7.0
    header, _, line = summary.render(tmp_path, timings=True).splitlines()
    assert dict(zip(header.split(), line.split()))["advantages_s"] == "2.0"


def test_every_objectives_training_path_is_among_the_summary_stages():
    from rewardloop.objectives import OBJECTIVES

    for name, objective in OBJECTIVES.items():
        path = results_layout.training_path(objective.signal)
        assert set(path) <= set(summary.stages()) and "eval" not in path, name
    assert summary.stages() == ("generate", "score", "advantages", "pairs", "train", "export", "eval")


def _long_run(folder: Path, iterations: int = 12) -> None:
    """A results folder of ``iterations`` iterations with every stage timed and a long guard verdict."""
    for it in range(iterations):
        name = f"iter_{it:03d}"
        (folder / name / "metrics").mkdir(parents=True)
        (folder / name / "metrics/score.json").write_text('{"rollout/reward/raw_mean": 0.123456, "rollout/reward/raw_std": 0.5}')
        (folder / name / "metrics/eval.json").write_text('{"eval/reward/mean": 0.654321}')
        (folder / name / "metrics/pairs.json").write_text('{"pairs/count": 1024}')
        (folder / name / "metrics/train.json").write_text('{"history": [{"train/loss": 0.693147, "train/implicit_acc": 0.5}]}')
        checks = [{"check": f"gold_{k}_drop_beyond_threshold"} for k in range(4)]
        (folder / name / "guard.json").write_text(json.dumps({"status": "breach", "iteration": it, "breaches": checks}))
        (folder / "benchmarks" / name).mkdir(parents=True)
        for stage in ("generate", "score", "pairs", "train", "export", "eval"):
            (folder / "benchmarks" / name / f"{stage}.tsv").write_text("s\th:m:s\n12345.6\t3:25:45\n")


def test_summary_table_fits_100_columns_and_timings_widen_it(tmp_path, capsys):
    from rewardloop.cli import main as cli

    _long_run(tmp_path)
    assert cli.main(["summary", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == summary.columns(timings=False) and "train_s" not in lines[0]
    assert len(lines) == 2 + 12 and max(map(len, lines)) <= 100
    assert lines[2].endswith("...") and lines[2].split()[-2] == "breach:"  # the verdict cut to fit, and says so
    assert cli.main(["summary", str(tmp_path), "--timings"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert wide[0].split() == summary.columns() and max(map(len, wide)) > 100
    assert wide[2].endswith("gold_3_drop_beyond_threshold")  # whole: --timings does not cut
    assert dict(zip(wide[0].split(), wide[2].split()))["train_s"] == "12345.6"
    assert cli.main(["summary", str(tmp_path), "--format", "csv"]) == 0  # CSV: every column, whole
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(table[0]) == summary.columns() and table[0]["guard"].endswith("gold_3_drop_beyond_threshold")


@pytest.mark.workflow
def test_a_benchmark_joins_the_report_through_one_job_and_a_further_checkpoint_reruns_only_it(results, tmp_path,
                                                                                               repo_root):
    """After `rewardloop benchmark`, `snakemake` plans rule benchmark_table alone (the run itself is finished),
    which writes report/benchmarks.csv, the summary's table as CSV, into `snakemake --report`; a rerun plans
    nothing until a benchmark of another checkpoint is added."""
    from rewardloop.reports.benchmark_table import render
    from rewardloop.cli.main import main
    from workflow_helpers import copy_run, planned_jobs

    work = copy_run(results.parent, tmp_path / "run")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join((repo_root / "resources/prompts/eval.txt").read_text().splitlines()[:2]) + "\n")

    def benchmark(checkpoints):
        assert main(["benchmark", str(work / "results"), "--benchmark", f"two={prompts}:text", "--metric",
                     "color_match", "--checkpoints", checkpoints]) == 0

    benchmark("base")
    assert planned_jobs(snakemake(work, "-n")) == {("benchmark_table", ""): 1, ("all", ""): 1}
    snakemake(work)
    table = work / "results/report" / results_layout.BENCHMARK_REPORT
    assert table.read_text() == render(work / "results", "csv") + "\n"
    assert planned_jobs(snakemake(work, "-n")) == {}
    report = work / "report.html"
    snakemake(work, "--report", str(report))
    assert results_layout.BENCHMARK_REPORT in report.read_text()

    benchmark("base,last")  # base's file kept, the last checkpoint's added
    assert planned_jobs(snakemake(work, "-n")) == {("benchmark_table", ""): 1, ("all", ""): 1}
    snakemake(work)
    assert list(pd.read_csv(table).columns)[-3:] == ["iter_000_mean", "iter_000_ci95", "iter_000_n"]

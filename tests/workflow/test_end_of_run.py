"""The end of a successful run (Snakefile onsuccess, src/rewardloop/reports/end_of_run.py): the summary table,
the guard's verdict, the best checkpoint and where to look, read from a finished run's files; a
fan-out's comparison headline; and on the terminal of a real rerun, with no diffusers LoRA noise."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from rewardloop.reports import compare, end_of_run, summary
from rewardloop.artifacts import write_json
from rewardloop.monitors.guard import Breach, verdict
from workflow_helpers import ROOT, copy_run, snakemake

pytestmark = pytest.mark.workflow

HEADER = "== rewardloop: the run in results finished =="


def eval_means(results: Path) -> dict[int, float]:
    """{iteration: eval mean} of the exported iterations, straight from their metrics files."""
    return {int(folder.name.removeprefix("iter_")): json.loads((folder / "metrics/eval.json").read_text())["eval/reward/mean"]
            for folder in sorted(results.glob("iter_*")) if (folder / "checkpoint").is_dir()}


def value_of(block: str, label: str) -> str:
    """The value of the block's pointer line ``<label>: value``."""
    (line,) = [line for line in block.splitlines() if line.startswith(f"{label}:")]
    return line.split(":", 1)[1].strip()


def test_the_block_of_a_finished_run_says_what_its_files_say(finished_run, monkeypatch):
    monkeypatch.chdir(finished_run)  # the Snakefile passes RUN_FOLDERS, relative to the workdir
    block = end_of_run.text(["results"])
    lines = block.splitlines()
    assert lines[0] == HEADER
    assert summary.render("results") in block  # the table of `rewardloop summary`, whole
    verdicts = [json.loads(p.read_text())["status"] for p in sorted(Path("results").glob("iter_*/guard.json"))]
    assert verdicts == ["ok", "ok"], "the tiny run's guard found a breach: this test's expectation is stale"
    assert value_of(block, "guard") == "ok at iterations 0, 1"
    means = eval_means(Path("results"))
    top = max(means, key=lambda it: (means[it], -it))
    assert value_of(block, "best") == (f"iteration {top} (eval/reward/mean {means[top]:.4f}): "
                                       f"results/iter_{top:03d}/checkpoint")
    assert Path(value_of(block, "curves")).is_file()
    assert "make report" in value_of(block, "report")
    assert "MLflow" not in block  # tracking is off in this run


def test_a_breach_and_the_linked_best_checkpoint_are_named(finished_run, tmp_path, monkeypatch):
    run = copy_run(finished_run, tmp_path / "run")
    monkeypatch.chdir(run)
    breach = Breach("dark_fraction_rise", value=0.9, base=0.1, threshold=0.3, message="darker")
    write_json(verdict(1, [breach], stop=False), "results/iter_001/guard.json")
    write_json({"iteration": 0, "metric": "eval/reward/mean", "value": 0.5, "lora_dir": "results/iter_000/checkpoint"},
               "results/best.json")
    block = end_of_run.text(["results"])
    assert value_of(block, "guard") == "iteration 1: breach: dark_fraction_rise (details: results/iter_XXX/guard.json)"
    assert value_of(block, "best") == "iteration 0 (eval/reward/mean 0.5000): results/best -> results/iter_000/checkpoint"


def test_a_fanout_prints_each_experiments_last_iteration_once(finished_run, tmp_path, monkeypatch):
    """Three runs of two experiments, laid out as a fan-out's results/ (the finished run's files as each run)."""
    results = tmp_path / "results"
    shutil.copytree(finished_run / "results/base", results / "base")
    folders = [f"results/{name}/seed_{seed}" for name, seed in (("low", 0), ("low", 1), ("high", 0))]
    for folder in folders:
        shutil.copytree(finished_run / "results", tmp_path / folder, ignore=shutil.ignore_patterns("base"))
    monkeypatch.chdir(tmp_path)
    block = end_of_run.text(folders, fanout_results="results")
    table = compare.rows("results", only={"low": [0, 1], "high": [0]})
    last = [row for row in table if row["iteration"] == 1]
    assert [row["experiment"] for row in last] == ["high", "low"]
    assert compare.format_table(last) in block
    assert block.splitlines()[0] == "== rewardloop: 3 runs in results finished; each experiment's last iteration =="
    assert summary.columns()[1] not in block  # no per-run summary table
    assert value_of(block, "guard") == "no breach in any run"
    assert value_of(block, "best") == "rewardloop best results/<experiment>/seed_<s> --guard"


def test_a_rerun_ends_on_the_block_without_lora_noise(finished_run, tmp_path):
    """Redoing iteration 1's eval (it loads that iteration's LoRA) prints the block on stdout, after
    every job; diffusers' "No LoRA keys" is neither on the terminal nor in the job's log. A rerun with
    nothing to do runs no hook (Snakemake 9), so it prints no block."""
    run = copy_run(finished_run, tmp_path / "run")
    (run / "results/iter_001/eval.parquet").unlink()
    result = snakemake(run)
    assert "Finished jobid" in result.stderr  # jobs ran
    block = result.stdout[result.stdout.index(HEADER):]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(run)
        assert block.rstrip("\n") == end_of_run.text(["results"])  # the whole block, last on stdout
    assert "No LoRA keys" not in result.stdout + result.stderr
    assert "No LoRA keys" not in (run / "results/logs/iter_001/eval.log").read_text()

    again = snakemake(run)
    assert "Nothing to be done" in again.stdout + again.stderr
    assert HEADER not in again.stdout


def test_a_first_run_that_builds_its_model_ends_on_the_rows_and_the_mlflow_address(tmp_path):
    """What a fresh clone's `make run` does, small: the default config's build_tiny_model job (a short build)
    in the same invocation as the loop, MLflow on its default store. The block, last on stdout, has a row
    per model (base and iteration 0) and the runs table's address; no line of it starts with a blank, so a
    reader who drops Snakemake's indented job lines (``grep -v '^ '``) still sees them."""
    overlay = {
        "iterations": 1,
        "tiny": {"vae_steps": 4, "unet_steps": 4, "threads": 1},
        "prompts": {"train": str(ROOT / "resources/prompts/train.txt"), "eval": str(ROOT / "resources/prompts/eval.txt")},
        "generate": {"prompts_per_iteration": 4, "images_per_prompt": 2, "steps": 2, "batch_size": 8},
        "train": {"steps": 2, "batch_size": 2, "checkpointing_steps": 1},
        "eval": {"seeds": [0], "steps": 2},
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(overlay))
    result = snakemake(tmp_path)
    assert "rule build_tiny_model:" in result.stdout + result.stderr  # the build ran in this invocation
    block = result.stdout[result.stdout.index(HEADER):].rstrip("\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        assert block == end_of_run.text(["results"])
        rows = summary.rows("results")
    lines = block.splitlines()
    table = lines[1:lines.index("")]
    assert [line.split()[0] for line in table[2:]] == ["base", "0"] and len(rows) == 2
    assert "runs table: http://127.0.0.1:5000/#/experiments/" in value_of(block, "MLflow")
    assert not [line for line in lines if line.startswith((" ", "\t"))]

"""The reward-hacking guard in the real workflow on the tiny model: gold rewards added to a finished run
rescore it and run nothing else of the loop (the rule and `rewardloop rescore`), and a run made to hack
trips the guard, which stops it before the next iteration trains and lets it go on when told to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from rewardloop.artifacts import decode_image
from rewardloop.rewards.jpeg import jpeg_size_kb

from workflow_helpers import SNAKEMAKE, ROOT, copy_run, file_digests, planned_jobs, snakemake, tiny_overlay, write_overlay

pytestmark = pytest.mark.workflow

REWARDLOOP = str(Path(sys.executable).with_name("rewardloop"))
GOLD = {"jpeg_compressibility": 1.0, "ocr": {"weight": 1.0}}
# What adding gold rewards may run: the rescoring, what reads it (guard, report figure, MLflow's tracking
# jobs, best), and report_config (its params are the whole config).
MONITOR_RULES = {"rescore", "guard", "plot_health", "track_base", "track_iteration", "report_config", "all"}
FOLDERS = ("base", "iter_000", "iter_001")
# What rescoring writes or rewrites; every other file of the run must stay byte for byte and mtime as it was.
REWRITTEN = ("results/.rewardloop.lock", "results/logs", "results/benchmarks", "results/report", "results/mlflow.db", "results/mlartifacts",
             ".snakemake", "gold.yaml")


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_model):
    """A finished, tracked 2-iteration run (SQLite store in results/) without gold rewards."""
    work = tmp_path_factory.mktemp("finished")
    # OCR prompts (the gold ocr reward reads their quoted text), a model-free trained reward
    for split, texts in (("train", ["OPEN", "CAFE", "EXIT", "STOP", "SALE", "HOME"]), ("eval", ["BOOK", "PARK", "TAXI"])):
        (work / f"{split}.txt").write_text("".join(f'a sign that reads "{text}"\n' for text in texts))
    write_overlay(work, tiny_overlay(tiny_model, tracking={"enabled": True}, eval={"seeds": [0, 1]},
                                     prompts={"train": str(work / "train.txt"), "eval": str(work / "eval.txt")},
                                     rewards={"color_match": None, "jpeg_incompressibility": 1.0}))
    snakemake(work)
    return work


def unchanged_files(work: Path) -> dict:
    return {path: digest for path, digest in file_digests(work, skip=REWRITTEN).items()
            if "/rescore/" not in path and not path.endswith(("guard.json", "tracking.json"))}


def eval_jpeg_scores(folder: Path) -> dict[str, float]:
    table = pq.read_table(folder / "eval.parquet").to_pandas()
    return {sid: -jpeg_size_kb(decode_image(cell, sid)) for sid, cell in zip(table.sample_id, table.image)}


def gold_metric(work: Path, name: str) -> dict[int, float]:
    """{step: value} of gold/<name>/mean in the run's MLflow parent run."""
    from mlflow.tracking import MlflowClient

    parent = json.loads((work / "results/tracking/run.json").read_text())
    client = MlflowClient(tracking_uri=f"sqlite:///{work}/results/mlflow.db")
    return {m.step: m.value for m in client.get_metric_history(parent["run_id"], f"gold/{name}/mean")}


def test_gold_rewards_added_to_a_finished_run_rescore_it_and_run_nothing_of_the_loop(finished, tmp_path):
    work = copy_run(finished, tmp_path / "run")
    gold = work / "gold.yaml"
    gold.write_text(yaml.safe_dump({"gold_rewards": GOLD}))
    before = unchanged_files(work)
    planned = planned_jobs(snakemake(work, "-n", overlays=(gold,)))
    assert {rule for rule, _ in planned} <= MONITOR_RULES, sorted(planned)
    assert planned[("rescore", "folder=base, gold=ocr")] == 1  # every folder x every gold reward
    assert sum(n for (rule, _), n in planned.items() if rule == "rescore") == len(FOLDERS) * len(GOLD)

    snakemake(work, overlays=(gold,))
    assert unchanged_files(work) == before  # no rollout, score, model, eval, grid or health file touched
    for folder in FOLDERS:
        samples = work / "results" / folder / "samples.parquet"
        rescored = pq.read_table(work / f"results/{folder}/rescore/jpeg_compressibility.parquet").to_pandas()
        expected_rows = (pq.read_metadata(samples).num_rows if samples.exists() else 0) + \
            pq.read_metadata(work / f"results/{folder}/eval.parquet").num_rows
        assert len(rescored) == expected_rows
        assert set(rescored.source) == ({"rollout", "eval"} if samples.exists() else {"eval"})
        on_eval = rescored[rescored.source == "eval"]
        expected = eval_jpeg_scores(work / "results" / folder)
        assert dict(zip(on_eval.sample_id, on_eval.reward_jpeg_compressibility)) == pytest.approx(expected)
        ocr = pq.read_table(work / f"results/{folder}/rescore/ocr.parquet").to_pandas()
        assert ocr.reward_ocr.between(0, 1).all() and len(ocr) == expected_rows
        metrics = json.loads((work / f"results/{folder}/rescore/jpeg_compressibility.json").read_text())
        assert metrics["gold/jpeg_compressibility/mean"] == pytest.approx(sum(expected.values()) / len(expected))
    logged = gold_metric(work, "jpeg_compressibility")
    assert sorted(logged) == [-1, 0, 1]
    assert logged[0] == pytest.approx(json.loads(
        (work / "results/iter_000/rescore/jpeg_compressibility.json").read_text())["gold/jpeg_compressibility/mean"])
    # the tracking job logged the iteration's values again: MLflow kept one copy of each (same step and timestamp)
    from mlflow.tracking import MlflowClient

    marker = json.loads((work / "results/iter_001/tracking.json").read_text())
    client = MlflowClient(tracking_uri=f"sqlite:///{work}/results/mlflow.db")
    assert marker["status"] == "ok" and "gold/jpeg_compressibility/mean" in marker["monitors"]["metrics"]
    for key in marker["metrics"][:5]:
        assert len(client.get_metric_history(marker["run_id"], key)) == 1, key
    verdict = json.loads((work / "results/iter_001/guard.json").read_text())
    assert verdict["status"] in ("ok", "breach")  # the guard read the gold rewards (its inputs): ran again
    assert planned_jobs(snakemake(work, "-n", overlays=(gold,))) == {}


def test_rewardloop_rescore_adds_the_files_without_touching_anything_else(finished, tmp_path):
    work = copy_run(finished, tmp_path / "run")
    before = unchanged_files(work)
    cmd = [REWARDLOOP, "rescore", "--reward", "jpeg_compressibility", str(work / "results")]
    result = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr
    assert unchanged_files(work) == before
    for folder in FOLDERS:
        assert (work / f"results/{folder}/rescore/jpeg_compressibility.parquet").is_file()
    on_eval = pq.read_table(work / "results/iter_001/rescore/jpeg_compressibility.parquet").to_pandas()
    on_eval = on_eval[on_eval.source == "eval"]
    assert dict(zip(on_eval.sample_id, on_eval.reward_jpeg_compressibility)) == pytest.approx(
        eval_jpeg_scores(work / "results/iter_001"))
    assert sorted(gold_metric(work, "jpeg_compressibility")) == [-1, 0, 1]  # logged to the tracked run
    again = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert again.returncode == 0 and again.stdout.count("kept") == len(FOLDERS)
    bad = subprocess.run([REWARDLOOP, "rescore", "--reward", "no_such_reward", str(work / "results")],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "no_such_reward" in bad.stderr


HACK = {
    # DPO on JPEG compressibility at a learning rate 1400x the recipe's: in one iteration the images
    # collapse while the trained reward climbs. Measured on the session's tiny model (built with 1 thread),
    # CPU kernels pinned as the tests run: diversity within a prompt 0.227 -> 0.085, reward -1.0702 ->
    # -1.0606 (under the first pin, MKL's Intel-only branch: 0.091, -1.0647 on an AMD EPYC, and the
    # reward fell to -1.0714 on an Intel Xeon; unpinned: 0.084, -1.0590; on a 2-thread build: 0.087,
    # -1.0613). At 1000x (0.25) the
    # 2-thread build's reward fell (-1.0797); at 2000x (0.5) iteration 1, training on the collapsed
    # model's near-identical pairs, once went to a NaN loss (CI): this run stops before iteration 1 trains.
    "rewards": {"color_match": None, "jpeg_compressibility": 1.0},
    "gold_rewards": {"color_match": 1.0},
    "generate": {"prompts_per_iteration": 8, "images_per_prompt": 4},
    "train": {"steps": 20, "learning_rate": 0.35, "max_grad_norm": 100.0,
              "lora": {"rank": 16, "alpha": 16}},
    "eval": {"seeds": [0, 1]},
    "guard": {"stop": True},
    "tracking": {"enabled": False},
}


def test_a_run_made_to_hack_trips_the_guard_and_stops_before_the_next_iteration_trains(tiny_model, tmp_path):
    work = tmp_path / "hack"
    work.mkdir()
    write_overlay(work, tiny_overlay(tiny_model, **HACK))
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile", str(work / "test.yaml"),
           "--cores", "2"]
    stopped = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert stopped.returncode != 0
    assert "REWARD-HACKING GUARD: breaches in results at iteration 0: " in stopped.stderr
    results = work / "results"
    verdict = json.loads((results / "iter_000/guard_stopped.json").read_text())
    checks = {b["check"] for b in verdict["breaches"]}
    assert "diversity_ratio" in checks, verdict
    base_health = pq.read_table(results / "base/health.parquet").to_pylist()[0]
    health = pq.read_table(results / "iter_000/health.parquet").to_pylist()
    eval_health = next(row for row in health if row["source"] == "eval")
    assert eval_health["diversity"] < 0.5 * base_health["diversity"]
    base_reward = json.loads((results / "base/metrics/eval.json").read_text())["eval/reward/mean"]
    hacked = json.loads((results / "iter_000/metrics/eval.json").read_text())["eval/reward/mean"]
    assert hacked > base_reward  # the trained reward rose while the images collapsed
    assert "guard" in (results / "logs/iter_000/guard.log").read_text()
    # Stopped before iteration 1 trained: no model(1), every file of iteration 0 kept, no guard.json
    assert not (results / "iter_001/train").exists() and not (results / "iter_000/guard.json").exists()
    for name in ("samples.parquet", "scores.parquet", "pairs.parquet", "checkpoint/pytorch_lora_weights.safetensors",
                 "eval.parquet", "health.parquet", "rescore/color_match.parquet"):
        assert (results / "iter_000" / name).is_file(), name
    summary = subprocess.run([REWARDLOOP, "summary", str(results), "--format", "json"], capture_output=True, text=True)
    assert json.loads(summary.stdout)[1]["guard"].startswith("stopped: ") and "diversity_ratio" in summary.stdout
    kept = file_digests(results / "iter_000", skip=("guard",))

    # Told to go on: the rest of the run, the breach on record in guard.json.
    went_on = snakemake(work, "--config", "guard={stop: false}")
    assert file_digests(results / "iter_000", skip=("guard",)) == kept  # iteration 0 not redone
    assert (results / "iter_001/checkpoint/pytorch_lora_weights.safetensors").is_file()
    assert json.loads((results / "iter_000/guard.json").read_text())["status"] == "breach"
    assert not (results / "iter_000/guard_stopped.json").exists()
    assert "REWARD-HACKING GUARD" in went_on.stderr  # still said at the end of the run
    assert (results / "report/health.png").stat().st_size > 10_000

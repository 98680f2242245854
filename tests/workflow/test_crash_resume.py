"""Crash-proofing on the real workflow: determinism, SIGKILL in every stage, a full disk, stale temps.

The kill harness itself is bench/kill_harness.py (20 kills); these tests run its trial once with a
kill aimed at each stage, against an uninterrupted reference run of the same config.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import kill_harness as harness  # noqa: E402
from workflow_helpers import file_digests  # noqa: E402

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def overlay(tiny_model):
    return harness.run_overlay(tiny_model)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, overlay):
    """An uninterrupted run: its folder and outcome (LoRA sha256s, final eval table)."""
    workdir = harness.prepare(tmp_path_factory.mktemp("reference"), overlay)
    harness.run_to_completion(workdir, max_attempts=1)
    return workdir, harness.outcome(workdir, overlay["iterations"])


def snapshot(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` but the run lock (it holds a pid)."""
    return file_digests(folder, skip=(".rewardloop.lock",), mtime=False)


def ran_in_warm_worker(workdir: Path) -> set[str]:
    """The jobs (log files) that ran in a fork of the warm worker (snakemake_job.job says so)."""
    logs = (workdir / "results/logs").rglob("*.log")
    return {str(log.relative_to(workdir)) for log in logs if "of the warm worker" in log.read_text()}


def jobs_run(workdir: Path) -> set[str]:
    """The iteration stages that wrote a log in ``workdir`` (results/logs/iter_000/<stage>.log)."""
    return {log.stem for log in (workdir / "results/logs/iter_000").glob("*.log")}


def test_two_uninterrupted_runs_warm_and_cold_give_bit_identical_loras_and_eval(tmp_path, overlay, reference):
    """The reference (warm) and a cold run of its first iteration: every stage's job in a process of its own gives
    the same bytes (the second iteration's jobs are the same stages again, 40 s of CI that would show nothing new)."""
    reference_dir, expected = reference
    assert any("train.log" in log for log in ran_in_warm_worker(reference_dir))  # warm_start: the default
    workdir = harness.prepare(tmp_path / "again", {**overlay, "warm_start": False, "iterations": 1})
    harness.run_to_completion(workdir, max_attempts=1)
    assert not ran_in_warm_worker(workdir)  # every job imported its own libraries
    assert {"generate", "score", "pairs", "train", "export", "eval"} <= jobs_run(workdir)
    again = harness.outcome(workdir, 1)
    assert again["loras"] == expected["loras"][:1]
    assert again["final_eval"].equals(harness.outcome(reference_dir, 1)["final_eval"])


def test_sigkill_in_every_stage_then_the_same_command_gives_the_same_result(tmp_path, overlay, reference):
    reference_dir, expected = reference
    jobs = harness.stage_jobs(reference_dir)
    # 8 kills in a row, one aimed at each stage, each as soon as the stage's next job has started (its
    # log written in that attempt; mid-epoch: its in-stage checkpoint saved), so that the short jobs
    # (pairs, export: ~0.2 s) are interrupted too.
    kills = harness.plan_kills(len(harness.TARGETS), jobs, seed=1, first_job=True, at_start=True)
    kills, attempts = harness.trial(tmp_path / "killed", overlay, kills)
    assert all(kill.fired for kill in kills), [(k.stage, k.running) for k in kills]
    # Each kill interrupted a job of the stage it aimed at (announced by Snakemake and not reported
    # finished when it died), and so every stage was interrupted.
    missed = [(k.stage, k.running) for k in kills if k.stage not in k.stages_hit()]
    assert not missed, missed
    assert set().union(*(kill.stages_hit() for kill in kills)) == set(harness.TARGETS)
    assert attempts == 1  # the same command, once, finishes the run: no --unlock, no cleanup by hand
    result = harness.outcome(tmp_path / "killed", overlay["iterations"])
    assert result["loras"] == expected["loras"]
    assert result["final_eval"].equals(expected["final_eval"])
    # The mid-epoch kill left a checkpoint, and the train it interrupted resumed from that step.
    mid = next(k for k in kills if k.stage == harness.MID_TRAIN)
    assert mid.train_state_step and mid.train_state_step in harness.resumed_trains(tmp_path / "killed").values()
    assert not list((tmp_path / "killed/results").rglob(".tmp-*"))


def test_stale_temps_of_killed_jobs_are_removed_and_never_read(tmp_path, reference):
    reference_dir, _ = reference
    workdir = tmp_path / "run"
    shutil.copytree(reference_dir, workdir, symlinks=True)
    before = snapshot(workdir / "results")
    stale_file = workdir / "results/iter_001/.tmp-samples.parquet.x1y2"
    stale_file.write_bytes(b"half a parquet file")
    stale_dir = workdir / "results/iter_001/.tmp-checkpoint.a1b2"
    (stale_dir / "merged").mkdir(parents=True)
    (stale_dir / "merged/model_index.json").write_text("{")
    # Only the report is redone (a forced job, so that the run starts); nothing reads the temps.
    done = subprocess.run(harness.command(workdir) + ["--forcerun", "report_config"], capture_output=True,
                          text=True, env=harness.job_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "removed 2 temp file(s) left by killed jobs" in done.stdout + done.stderr
    assert not stale_file.exists() and not stale_dir.exists()
    after = snapshot(workdir / "results")
    changed = {k for k in before if before[k] != after.get(k)}
    # (and the warm worker's log: one line per run)
    assert changed <= {"report/config.yaml", "benchmarks/report/config.tsv", "logs/report/config.log",
                       "logs/warm_worker.log"}, changed


def test_a_full_disk_fails_the_stage_clearly_and_keeps_earlier_artifacts(tmp_path, reference):
    """A 64 KiB file size limit (ulimit -f) on an extension run: the first file over it fails its
    stage with a message naming the file and the cause."""
    reference_dir, _ = reference
    workdir = tmp_path / "run"
    shutil.copytree(reference_dir, workdir, symlinks=True)
    before = snapshot(workdir / "results")
    command = " ".join(harness.command(workdir, cores=1) + ["--config", "iterations=3"])
    done = subprocess.run(["bash", "-c", f"ulimit -f 64 && exec {command}"], capture_output=True, text=True,
                          env=harness.job_env())
    output = done.stdout + done.stderr
    assert done.returncode != 0
    # (The first file over 64 KiB is the new train's state; generate's 46 KB of samples fit.)
    failed = re.search(r"rule (\w+) failed: OutOfSpaceError: results/iter_002/(\S+): could not be written "
                       r"\(File too large\): the disk is full", output)
    assert failed, output[-3000:]
    assert not (workdir / "results/iter_002" / failed.group(2)).exists()
    after = snapshot(workdir / "results")
    # Every finished artifact is as it was (the report's config is legitimately redone: iterations
    # changed; logs and benchmark files are per attempt).
    redone = ("report/", "benchmarks/", "logs/")
    assert {k: after.get(k) for k in before if not k.startswith(redone)} == {
        k: v for k, v in before.items() if not k.startswith(redone)}
    assert not list((workdir / "results").rglob(".tmp-*"))

"""previous_versions' file side: what is kept, and what a killed run's leftover links give back.
(The Snakemake side, failed jobs and their metadata records, is tests/workflow/test_rerun_protection.py.)"""

from __future__ import annotations

import os
from pathlib import Path

from rewardloop.runtime import previous_versions, runlock


def finished_folder(root: Path) -> Path:
    results = root / "results"
    for rel, text in {"base/eval.parquet": "eval", "iter_000/samples.parquet": "samples",
                      "iter_000/metrics/generate.json": "{}", "logs/iter_000/generate.log": "log",
                      "iter_000/.tmp-samples.parquet.ab12": "half", runlock.LOCK_NAME: "123",
                      "mlflow.db": "sqlite"}.items():
        (results / rel).parent.mkdir(parents=True, exist_ok=True)
        (results / rel).write_text(text)
    return results


def test_the_kept_files_are_the_finished_ones_not_logs_temps_or_files_changed_in_place(tmp_path):
    results = finished_folder(tmp_path)
    kept = {str(p) for p in previous_versions.finished_files(results)}
    assert kept == {"base/eval.parquet", "iter_000/samples.parquet", "iter_000/metrics/generate.json"}


def test_the_kept_folder_is_a_hidden_sibling_of_the_results(tmp_path):
    assert previous_versions.folder_of(tmp_path / "results") == tmp_path / ".results.previous"
    assert previous_versions.folder_of("results") == Path(".results.previous")


def test_a_killed_runs_links_give_back_what_is_missing_and_nothing_else(tmp_path):
    results = finished_folder(tmp_path)
    kept = previous_versions.folder_of(results)
    for rel in previous_versions.finished_files(results):
        (kept / rel).parent.mkdir(parents=True, exist_ok=True)
        os.link(results / rel, kept / rel)
    inode = (results / "base/eval.parquet").stat().st_ino
    (results / "base/eval.parquet").unlink()  # removed by the killed job
    (results / "iter_000/samples.parquet").unlink()  # replaced by a job that finished before the kill
    (results / "iter_000/samples.parquet").write_text("new samples")
    line = previous_versions.restore_left_over(results)
    assert line.startswith("rewardloop: a killed run had removed finished work: restored 1 finished file(s)")
    assert "base/eval.parquet" in line
    assert (results / "base/eval.parquet").read_text() == "eval"
    assert (results / "base/eval.parquet").stat().st_ino == inode  # the same file, mtime and all
    assert (results / "iter_000/samples.parquet").read_text() == "new samples"
    assert not kept.exists()


def test_without_leftover_links_nothing_happens(tmp_path):
    results = finished_folder(tmp_path)
    assert previous_versions.restore_left_over(results) is None
    assert previous_versions.restore_left_over(tmp_path / "absent") is None


def test_a_long_restore_line_names_five_files_and_counts_the_rest(tmp_path):
    results = tmp_path / "results"
    kept = previous_versions.folder_of(results)
    for i in range(7):
        (kept / f"iter_00{i}").mkdir(parents=True)
        (kept / f"iter_00{i}/eval.parquet").write_text(str(i))
    results.mkdir()
    line = previous_versions.restore_left_over(results)
    assert "restored 7 finished file(s)" in line and line.endswith("and 2 more)")
    assert sorted(p.name for p in results.iterdir()) == [f"iter_00{i}" for i in range(7)]


def test_the_run_lock_probe_sees_a_live_holder(tmp_path):
    assert runlock.is_free(tmp_path)  # no lock file yet
    held = runlock.acquire(tmp_path)
    try:
        # flock is per open file: a second open in this process is refused like another process would be
        assert not runlock.is_free(tmp_path)
    finally:
        runlock._held.pop().close()
    assert held.exists() and runlock.is_free(tmp_path)

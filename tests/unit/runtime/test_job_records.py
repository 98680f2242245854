"""results/'s copy of Snakemake's records (src/rewardloop/runtime/job_records.py), on record files named as
Snakemake names them (urlsafe base64 of the output's path; the real workflow: tests/workflow/test_integrity.py)."""

from __future__ import annotations

import base64
from pathlib import Path

from rewardloop.runtime import job_records


def record(metadata: Path, path: str, text: str) -> Path:
    file = metadata / base64.urlsafe_b64encode(path.encode()).decode()
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text)
    return file


def test_keep_copies_the_records_of_results_files_only_and_drops_those_of_files_gone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # record names are paths relative to the working directory
    metadata = Path(".snakemake/metadata")
    for name in ("results/a.parquet", "results/b.parquet", "elsewhere/c.parquet"):
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        Path(name).write_text("x")
        record(metadata, name, f'{{"params": "{name}"}}')
    record(metadata, "results/gone.parquet", "{}")  # a record whose file was deleted
    assert job_records.keep("results", metadata) == 2
    copy = Path("results") / job_records.FOLDER
    assert sorted(job_records._recorded_path(f, copy) for f in copy.iterdir()) == ["results/a.parquet",
                                                                                  "results/b.parquet"]
    Path("results/b.parquet").unlink()
    assert job_records.keep("results", metadata) == 1  # b's copy is dropped with b


def test_restore_gives_back_missing_records_of_existing_files_and_never_replaces_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # record names are paths relative to the working directory
    metadata = Path(".snakemake/metadata")
    Path("results").mkdir()
    for name in ("results/a.parquet", "results/b.parquet"):
        Path(name).write_text("x")
        record(metadata, name, f'{{"params": "old {name}"}}')
    job_records.keep("results", metadata)
    assert job_records.restore_missing("results", metadata) is None  # Snakemake has them all
    kept_b = record(metadata, "results/b.parquet", '{"params": "new"}')  # a record Snakemake rewrote
    a = next(f for f in metadata.iterdir() if f != kept_b)
    a.unlink()
    line = job_records.restore_missing("results", metadata)
    assert "no record of 1 finished file(s)" in line
    assert a.read_text() == '{"params": "old results/a.parquet"}'
    assert kept_b.read_text() == '{"params": "new"}'
    Path("results/a.parquet").unlink()
    a.unlink()
    assert job_records.restore_missing("results", metadata) is None  # no record for a file that is gone

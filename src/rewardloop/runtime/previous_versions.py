"""A rerun that fails cannot destroy finished work: the finished files it removed come back.

Before a job runs, Snakemake deletes the outputs it will replace; when the job then fails (a bad
weights file, a device that is not there, out of memory), the finished versions are gone, and with
them hours of GPU time. So, when a run starts (the Snakefile's ``onstart``), every finished file of
the results folder is hard-linked into a hidden sibling folder, ``.<results>.previous/``: a link costs
no disk until a job replaces the file (artifacts are written to a temp and renamed into place, never
changed in place, so the link keeps the finished bytes). Then:

- the run succeeds: the links are dropped (``release``);
- a job fails (``onerror``): every kept file that is now missing is linked back, with the Snakemake
  metadata record it had at the start (the failed job's record is of the new params: with it, the old
  bytes would pass for the new config's), and the log says which (``restore``). So are the files that
  describe the whole run (the recorded config, ``report/config.yaml``) that a job of the failed run
  rewrote: such a record changes only with the run that finishes the results it describes; otherwise a
  rerun whose next job fails would leave the config no finished table was made with, which
  ``rewardloop benchmark`` reads as the run's (the next run plans it again: its record is the old one);
- the run is killed (``kill -9``, power loss): no hook runs; the next run finds the links left over
  and links back what is missing before it plans anything (``restore_left_over``). Snakemake's own
  records were never rewritten then, and it still marks the killed job's outputs incomplete, so that
  job is redone (``rerun-incomplete``) from the files as they were.

Job logs are not kept (the failed job's log says why it failed), nor the links to the run's inputs
(``.inputs/``, placed anew by every run) and the copy of Snakemake's records (``.snakemake-records/``,
rewritten at the end of a run), nor the files changed in place
(the run lock, MLflow's SQLite store) or temps. Where the sibling folder is on another filesystem,
files are copied instead, which costs their size in disk and time.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from rewardloop import artifacts
from rewardloop.host import input_links
from rewardloop.runtime import job_records, runlock

SUFFIX = ".previous"
LOGS = "logs"
CHANGED_IN_PLACE = frozenset({runlock.LOCK_NAME, "mlflow.db", "mlflow.db.lock"})


def folder_of(results: str | os.PathLike) -> Path:
    """Where the finished files of ``results`` are kept while a run may replace them."""
    results = Path(results)
    return results.parent / f".{results.name}{SUFFIX}"


def finished_files(results: Path):
    """Paths (relative to ``results``) of the files a run's rerun protection keeps."""
    for directory, subdirs, files in os.walk(results):
        rel_dir = Path(directory).relative_to(results)
        if rel_dir == Path("."):
            subdirs[:] = [d for d in subdirs if d not in (LOGS, input_links.FOLDER, job_records.FOLDER)]
        for name in files:
            if name in CHANGED_IN_PLACE or name.startswith(artifacts.TEMP_PREFIX):
                continue
            yield rel_dir / name


def _link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copy2(source, target)


def _same_bytes(a: Path, b: Path) -> bool:
    """The same file (a link) or the same bytes (a copy, on another filesystem)."""
    return os.path.samefile(a, b) or (a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes())


def _link_back(kept: Path, results: Path) -> list[Path]:
    """Link every kept file that is missing under ``results`` back into place; the paths restored."""
    restored = []
    for directory, _, files in os.walk(kept):
        for name in files:
            rel = Path(directory, name).relative_to(kept)
            if not (results / rel).exists():
                _link_or_copy(kept / rel, results / rel)
                restored.append(rel)
    return sorted(restored)


def _say(restored: list[Path], results: Path, why: str) -> str:
    shown = ", ".join(str(p) for p in restored[:5]) + (f" and {len(restored) - 5} more" if len(restored) > 5 else "")
    return f"rewardloop: {why}: restored {len(restored)} finished file(s) under {results}/ ({shown})"


def restore_left_over(results: str | os.PathLike) -> str | None:
    """After a killed run: link back what its jobs removed, drop the left-over links; a line to print."""
    results, kept = Path(results), folder_of(results)
    if not kept.is_dir():
        return None
    restored = _link_back(kept, results) if results.is_dir() else []
    shutil.rmtree(kept)
    return _say(restored, results, "a killed run had removed finished work") if restored else None


class Kept:
    """The finished files of one results folder, kept for the length of one run."""

    def __init__(self, results: str | os.PathLike, persistence):
        self.results = Path(results)
        self.folder = folder_of(results)
        self.persistence = persistence
        self.records: dict[str, object] = {}

    def _key(self, rel: Path) -> str:
        """Snakemake's metadata key of a path under results: the path as the rules spell it."""
        return os.path.normpath(os.path.join(str(self.results), rel))

    def keep(self) -> int:
        """Link every finished file away, note the metadata of it and of its folders; the file count."""
        shutil.rmtree(self.folder, ignore_errors=True)
        count = 0
        folders = set()
        for rel in finished_files(self.results):
            _link_or_copy(self.results / rel, self.folder / rel)
            count += 1
            folders.update(rel.parents)
        for rel in [*finished_files(self.folder), *(f for f in folders if f != Path("."))]:
            record = self.persistence._read_record(self._key(rel))  # the metadata backend's interface
            if record is not None:
                self.records[self._key(rel)] = record
        return count

    def restore(self, run_records: Iterable[str] = ()) -> str | None:
        """After a failed job: what it removed comes back with its metadata, and so do ``run_records``
        (paths of files that describe the whole run) where the run rewrote them; a line to print."""
        if not self.folder.is_dir():
            return None
        missing_before = {key for key in self.records if not os.path.lexists(key)}
        rewritten = self._put_back_rewritten(run_records)
        missing_before.update(self._key(rel) for rel in rewritten)
        restored = sorted(rewritten + _link_back(self.folder, self.results))
        for key in missing_before:
            if os.path.lexists(key):
                self.persistence._write_record(key, self.records[key])
                self.persistence._unmark_incomplete(key)
        self.release()
        return _say(restored, self.results, "a failed job had removed finished work") if restored else None

    def _put_back_rewritten(self, paths: Iterable[str]) -> list[Path]:
        """Each of ``paths`` that a job replaced since the run started, replaced by its kept version
        (atomically: linked beside it, then renamed over it); the paths put back, relative to results."""
        put_back = []
        for path in paths:
            rel = Path(path).relative_to(self.results)
            current, kept = self.results / rel, self.folder / rel
            if not (kept.is_file() and current.is_file()) or _same_bytes(current, kept):
                continue
            beside = current.with_name(f"{artifacts.TEMP_PREFIX}{current.name}.previous")
            beside.unlink(missing_ok=True)
            _link_or_copy(kept, beside)
            os.replace(beside, current)
            put_back.append(rel)
        return put_back

    def release(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

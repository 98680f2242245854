"""The results folder keeps its own copy of Snakemake's record of every finished output, so that a run
whose ``.snakemake/`` is gone (deleted, or results/ moved without it) still sees a changed config.

Snakemake decides that a finished job must run again because its params, code or inputs changed by
comparing the job with the record it wrote for each output under ``.snakemake/metadata/``. Without
a record it compares nothing: a finished run whose ``.snakemake/`` was removed, given another
``train.steps``, plans nothing and would extend with iterations trained another way than the first.

So at the end of every run (``onsuccess``, ``onerror``) the records of the files under results/ are
copied to ``results/.snakemake-records/`` (the same file names: Snakemake's base64 of each output's
path relative to the working directory), and records of files that are gone are dropped there. As a
run starts, before Snakemake plans, a record missing from ``.snakemake/metadata/`` whose output is
still there is copied back, and the number said: Snakemake then compares params, code and inputs as
if its records had never gone. A record Snakemake has is never replaced. The copy lags a run killed
by ``kill -9`` (its last jobs' records are not copied until a later run ends); their outputs are then
as unchecked as before, and nothing else is.
"""

from __future__ import annotations

import base64
import binascii
import shutil
from pathlib import Path

from rewardloop.runtime import canonical_params

FOLDER = ".snakemake-records"  # in the results folder
METADATA = Path(".snakemake") / "metadata"  # Snakemake's records, relative to the working directory


def _recorded_path(record: Path, root: Path) -> str | None:
    """The output path a record names (Snakemake splits long base64 names into folders), or None."""
    name = "".join(record.relative_to(root).parts)
    try:
        return base64.urlsafe_b64decode(name).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def _records(root: Path, results: str):
    """(record file, output path) of each record under ``root`` that names a file in ``results``."""
    if not root.is_dir():
        return
    prefix = results.rstrip("/") + "/"
    for record in root.rglob("*"):
        if record.is_file():
            path = _recorded_path(record, root)
            if path is not None and path.startswith(prefix):
                yield record, path


def keep(results: str = "results", metadata: Path = METADATA) -> int:
    """Copy Snakemake's records of the files under ``results`` into it; drop copies of files that are
    gone. Returns how many records the copy holds."""
    copy = Path(results) / FOLDER
    kept = set()
    for record, path in _records(metadata, results):
        if not Path(path).exists():
            continue
        target = copy / record.relative_to(metadata)
        kept.add(target)
        if target.is_file() and target.read_bytes() == record.read_bytes():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        shutil.copyfile(record, tmp)
        tmp.replace(target)  # a reader never sees half a record
    for record, _ in list(_records(copy, results)):
        if record not in kept:
            record.unlink()
    return len(kept)


def restore_missing(results: str = "results", metadata: Path = METADATA) -> str | None:
    """Copy back each kept record that Snakemake no longer has, for an output that is still there; the
    line to say, or None when nothing was missing."""
    copy = Path(results) / FOLDER
    restored = 0
    for record, path in _records(copy, results):
        target = metadata / record.relative_to(copy)
        if target.exists() or not Path(path).exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(record, target)
        canonical_params.canonicalize_record(target)  # a copy kept by an older version compares by value too
        restored += 1
    if not restored:
        return None
    return (f"rewardloop: .snakemake/metadata had no record of {restored} finished file(s) under {results}/; "
            f"restored from {results}/{FOLDER}, so a changed config, code or input still reruns what it changes")

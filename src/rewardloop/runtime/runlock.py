"""One workflow run per results folder, with a lock that a killed run cannot leave behind.

Snakemake's own directory lock survives a ``kill -9`` and then makes the rerun stop until the user
runs ``--unlock``. This lock is an ``flock`` held by the main snakemake process for its lifetime:
the kernel releases it when that process dies, however it dies, so rerunning the same command
just works, while a second concurrent run in the same folder is refused. The profiles therefore
set ``nolock: true``.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = ".rewardloop.lock"
_held: list = []  # keeps the file object (and so the lock) alive until the process exits


class RunLockedError(RuntimeError):
    pass


def taken_ms(folder: str | os.PathLike) -> int | None:
    """When the run that holds (or last held) ``folder``'s lock took it, in ms (the lock file is
    rewritten then); None without a lock file."""
    try:
        return int((Path(folder) / LOCK_NAME).stat().st_mtime * 1000)
    except OSError:
        return None


def is_free(folder: str | os.PathLike) -> bool:
    """Whether no live run holds ``folder``'s lock (probed, not taken)."""
    path = Path(folder) / LOCK_NAME
    if not path.is_file():
        return True
    with open(path) as handle:  # flock needs no write access: a read-only results/ can still be planned (-n)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
    return True


class ResultsNotWritableError(PermissionError):
    pass


def acquire(folder: str | os.PathLike) -> Path:
    folder = Path(folder)
    path = folder / LOCK_NAME
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")
    except PermissionError as exc:  # before any job: the run would fail at its first output
        raise ResultsNotWritableError(
            f"{folder}: not writable ({exc.strerror}: {exc.filename}): a run writes its lock, results and logs "
            f"there; make it writable again (chmod -R u+w {folder}), or copy the run and work in the copy"
        ) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "unknown"
        handle.close()
        raise RunLockedError(
            f"{folder}: another rewardloop run is active in this results folder (pid {owner}); "
            "wait for it to finish or stop it first"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    _held.append(handle)
    return path

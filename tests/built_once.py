"""Expensive test inputs (tiny models, finished runs) built once per test session, not once per xdist worker.

`make test` runs pytest in 2 xdist workers; a session fixture is per worker, so without this each
worker built its own copy of every tiny model and finished run. Here the first worker to ask builds
the folder under a file lock, in the temp folder that all the session's workers share; the others wait
for it and get the same folder.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

def shared_root(tmp_path_factory) -> Path:
    """The folder every worker of this session sees: xdist gives each worker its own base temp
    (``.../pytest-N/popen-gwK``), inside the session's; without xdist, our own base temp (its parent
    holds earlier sessions, whose builds may be of older code)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """``<shared root>/built-once/<name>``, made by ``build(folder)`` on the first call of the session
    (``folder`` exists, empty); later calls, from any worker, wait for that build and return the folder.

    The folder is built where it stays (no rename), so absolute paths recorded in it (a run's config,
    Snakemake's metadata) remain true. Callers must not change it: a test that does works on a copy.
    """
    from filelock import FileLock  # here: the paddleocr tier's venv (tests/paddleocr_ci.sh) builds nothing

    root = shared_root(tmp_path_factory) / "built-once"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.built"  # no done marker: a build that failed or was killed
    with FileLock(str(root / f"{name}.lock")):
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder

"""The tracking jobs' marker files and the end-of-run line that reads them.

Tracking never fails a job: each job's work runs inside :func:`marking`, which writes its marker
JSON whatever happens, ``status`` ``ok``, ``skipped`` (no parent run: the reason) or ``failed`` (the
``reason``, a short ``summary``, ``retryable``), always with the ``seconds`` spent. At the end of the
run the Snakefile prints :func:`report`'s one line when a marker says failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from rewardloop import results_layout as layout
from rewardloop.artifacts import write_json
from rewardloop.tracking.errors import Skipped, retryable, summary
from rewardloop.tracking.store import DEFAULT_RESULTS


@dataclass
class Marking:
    """One tracking job's marker while it works: the job fills ``marker`` and sets ``answered`` once
    the store has answered (a connection error after that may pass; before, it is the answer)."""

    marker: dict
    answered: bool = True
    started: float = field(default_factory=time.perf_counter)

    def seconds(self) -> float:
        return round(time.perf_counter() - self.started, 3)


@contextlib.contextmanager
def marking(marker: dict, path, answered: bool = True) -> Iterator[Marking]:
    """Run the block, then write ``marker`` to ``path`` with its ``seconds``: as it is, or marked skipped
    (a :class:`Skipped` raised) or failed (any other error, printed with its traceback). Never raises
    an ``Exception``: the job goes on and the workflow with it."""
    job = Marking(marker, answered)
    try:
        yield job
        marker["seconds"] = job.seconds()
    except Skipped as exc:
        marker.update(status="skipped", reason=str(exc), seconds=job.seconds())
        print(f"tracking skipped: {exc}", file=sys.stderr, flush=True)
    except Exception as exc:
        marker.update(status="failed", reason=f"{type(exc).__name__}: {exc}".strip()[:2000], summary=summary(exc),
                      retryable=retryable(exc, answered=job.answered), seconds=job.seconds())
        print(f"tracking FAILED (the workflow goes on; `snakemake --forcerun <rule>` logs again; "
              f"{'retryable' if marker['retryable'] else 'not retryable'}, {marker['seconds']:.1f}s): "
              f"{marker['reason']}", file=sys.stderr, flush=True)
        traceback.print_exc()
    write_json(marker, path)


# --------------------------------------------------------------------------------- end of the run


def markers(results_dir: str | os.PathLike = DEFAULT_RESULTS) -> list[Path]:
    """The tracking markers under ``results_dir``: run.json first, then base, then the iterations."""
    run = layout.RunLayout(results_dir)
    found = [Path(run.tracking_run), Path(run.base) / layout.TRACKING_MARKER]
    found += [folder / layout.TRACKING_MARKER for _, folder in run.iteration_folders()]
    return [p for p in found if p.is_file()]


def _without_password(uri: str | None) -> str | None:
    """``http://user:secret@host`` → ``http://***@host`` (the line goes to a console)."""
    if not uri or "://" not in uri or "@" not in uri.split("/", 3)[2]:
        return uri
    scheme, rest = uri.split("://", 1)
    return f"{scheme}://***@{rest.split('@', 1)[1]}"


def failure_line(results_dir: str | os.PathLike = DEFAULT_RESULTS) -> str | None:
    """One line when a marker under ``results_dir`` says tracking failed, else None: the first failed
    marker's URI, its short cause and the marker's path (a skipped marker points at run.json)."""
    failed = []
    for path in markers(results_dir):
        try:
            marker = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(marker, dict) and marker.get("status") == "failed":
            failed.append((path, marker))
    if not failed:
        return None
    path, marker = failed[0]
    cause = marker.get("summary") or (marker.get("reason") or "no reason recorded").splitlines()[0][:160]
    uri = _without_password(marker.get("tracking_uri"))
    more = f" (and {len(failed) - 1} more marker{'s' if len(failed) > 2 else ''})" if len(failed) > 1 else ""
    return f"rewardloop: MLflow tracking failed ({f'{uri}: ' if uri else ''}{cause}); see {path}{more}"


def report(results_dir: str | os.PathLike = DEFAULT_RESULTS, file=None) -> str | None:
    """Snakefile onsuccess/onerror: print ``failure_line`` (to stderr) when there is one. Never raises:
    the run's exit status stays that of its jobs."""
    try:
        line = failure_line(results_dir)
        if line:
            print(line, file=file or sys.stderr, flush=True)
        return line
    except Exception as exc:  # noqa: BLE001 - a report must not change how the run ends
        print(f"rewardloop: could not read the tracking markers: {exc}", file=file or sys.stderr, flush=True)
        return None

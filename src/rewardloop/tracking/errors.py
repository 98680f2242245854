"""What a tracking error means: retryable or not, its short cause, and the retries of a locked SQLite store.

Errors are told apart by the lower-cased text of the exception and its causes (MLflow wraps
sqlalchemy's and requests' errors in its own), plus a RestException's HTTP status.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Callable

LOCK_MARKERS = ("database is locked", "database table is locked", "sqlite_busy")
# What makes an error retryable or not (lower-cased text of the exception and its causes).
FATAL_MARKERS = ("unable to open database file", "readonly database", "read-only file system", "permission denied",
                 "no such file or directory", "not a directory", "is a directory", "unsupported uri",
                 "maintenance mode", "error code 401", "error code 403", "unauthenticated", "permission_denied",
                 "unauthorized", "forbidden", "no module named", "is deleted")
ANSWERED_MARKERS = ("error responses", "error code 5", "error code 429", "temporarily_unavailable",
                    "resource_exhausted", "internal server error", "bad gateway", "service unavailable")
CONNECTION_MARKERS = ("connection refused", "newconnectionerror", "failed to establish a new connection",
                      "name or service not known", "failed to resolve", "nodename nor servname",
                      "temporary failure in name resolution", "no route to host", "network is unreachable",
                      "timed out", "timeout", "connection reset", "connection aborted", "remotedisconnected",
                      "connectionerror")

retry_stats = {"calls": 0, "retries": 0, "waited_s": 0.0}


class TrackingError(RuntimeError):
    pass


class Skipped(TrackingError):
    """No parent run (tracking_run failed): a later tracking job does nothing but say so."""


def _text(exc: BaseException) -> str:
    """The exception and its causes as one lower-cased string."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return " | ".join(parts).lower()


def _is_locked(exc: BaseException) -> bool:
    text = _text(exc)
    return any(marker in text for marker in LOCK_MARKERS)


def retryable(exc: BaseException, answered: bool = False) -> bool:
    """Whether trying again later may succeed: a locked SQLite database, an HTTP 5xx/429, and connection
    errors and timeouts of a server that ``answered`` before. Not: a store that cannot be opened or
    written, a missing folder, an unknown scheme, 401/403, a server never reached; unknown errors."""
    text = _text(exc)
    if any(marker in text for marker in LOCK_MARKERS):
        return True
    status = getattr(exc, "get_http_status_code", None)
    if type(exc).__name__ == "RestException" and callable(status):
        code = status()
        if code in (401, 403):
            return False
        if code == 429 or code >= 500:
            return True
    if any(marker in text for marker in FATAL_MARKERS):
        return False
    if isinstance(exc, (PermissionError, FileNotFoundError, NotADirectoryError, IsADirectoryError, FileExistsError,
                        ImportError, TrackingError)):
        return False
    if any(marker in text for marker in ANSWERED_MARKERS):
        return True
    if any(marker in text for marker in CONNECTION_MARKERS):
        return answered
    return False


def summary(exc: BaseException) -> str:
    """A short cause for the end-of-run line: "unable to open database file", "connection refused", ..."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    while line.startswith("(") and ") " in line:  # "(sqlite3.OperationalError) unable to open database file"
        line = line.split(") ", 1)[1]
    if len(line) > 160:
        text = _text(exc)
        known = [m for m in LOCK_MARKERS + FATAL_MARKERS + ANSWERED_MARKERS + CONNECTION_MARKERS if m in text]
        line = known[0] if known else line[:157] + "..."
    return line or type(exc).__name__


def retry(fn: Callable, *args, attempts: int = 12, base_delay: float = 0.05, max_delay: float = 4.0, **kwargs):
    """``fn(*args, **kwargs)``, retried with exponential backoff and jitter while SQLite is locked.

    Several jobs may log into one SQLite file at once; SQLite serialises writers and a writer that
    waits longer than its busy timeout gets "database is locked". Other errors propagate at once.
    """
    retry_stats["calls"] += 1
    for attempt in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # mlflow wraps sqlalchemy's OperationalError in MlflowException
            if not _is_locked(exc) or attempt == attempts - 1:
                raise
            delay = min(max_delay, base_delay * 2 ** attempt) * (0.5 + random.random())
            retry_stats["retries"] += 1
            retry_stats["waited_s"] += delay
            print(f"tracking: database locked ({type(exc).__name__}); retry {attempt + 1} in {delay:.2f}s",
                  file=sys.stderr, flush=True)
            time.sleep(delay)

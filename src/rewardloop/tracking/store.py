"""The tracking store: which URI, a client for it (a SQLite file bootstrapped under a lock, a server
asked once at first contact), and where a SQLite store's proxied artifacts live.

Importing this module changes nothing; a job's MLflow defaults are set when it first opens a store.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from pathlib import Path

from rewardloop import results_layout as layout
from rewardloop.tracking.errors import retry, retryable, summary

DEFAULT_RESULTS = layout.RunLayout().root  # the run folder, relative to the working directory
DEFAULT_TRACKING_URI = f"sqlite:///{DEFAULT_RESULTS}/mlflow.db"
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
FIRST_CONTACT_TIMEOUT_S = 10
ARTIFACTS_DIR = "mlartifacts"  # beside a SQLite store: what `--artifacts-destination` names
PROXIED_SCHEME = "mlflow-artifacts:"
# Defaults for a job that talks to a server: fail within about a minute, not the 7 retries of
# MLflow's default; the user's own settings win. No telemetry from a job.
JOB_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
                "MLFLOW_DISABLE_TELEMETRY": "true"}


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` when set, else ``sqlite:///results/mlflow.db`` (relative to the workdir)."""
    return os.environ.get(ENV_TRACKING_URI) or DEFAULT_TRACKING_URI


def use_job_defaults() -> None:
    """``JOB_DEFAULTS`` for the variables the user left unset. MLflow reads them per request, and its
    telemetry when it is imported: so this runs before a job's first ``import mlflow`` (in ``client``)."""
    for key, value in JOB_DEFAULTS.items():
        os.environ.setdefault(key, value)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (its query string left out); None for other schemes."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):].split("?")[0])
    return None


def absolute_sqlite(uri: str) -> str:
    """``uri`` with a relative SQLite file made absolute against the working directory, for this
    process's client only (the run records the relative URI, so a moved folder still finds its store).

    MLflow caches a store, and its engine's open connections, by URI string: a second relative
    ``sqlite:///results/mlflow.db`` opened from another folder in the same process would reach the
    first folder's database ("Run ... not found")."""
    db = sqlite_path(uri)
    if db is None or db.is_absolute() or db.name in ("", ":memory:"):
        return uri
    query = uri.partition("?")[2]
    return f"sqlite:///{db.resolve()}" + (f"?{query}" if query else "")


def check_sqlite(db: Path, timeout: float = 2.0) -> None:
    """Open ``db`` for writing (created when missing) and take and release a write lock, in
    milliseconds: "unable to open database file" or "readonly database" here is not retried (MLflow's
    engine setup retries any error 10 times, ~100 s); "database is locked" is, by ``retry``."""
    import sqlite3

    conn = sqlite3.connect(str(db), timeout=timeout, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        conn.execute(f"PRAGMA user_version = {int(version)}")  # a write: a read-only file or folder fails here
        conn.execute("ROLLBACK")
    finally:
        conn.close()


@contextlib.contextmanager
def _environ(**values: str):
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def client(uri: str, first_contact: bool = False):
    """An MlflowClient for ``uri`` (for SQLite: its folder is created, its store opened with retries).

    ``first_contact`` (tracking_run): a server is first asked once, without retries and with a short
    timeout; when it cannot be reached at all, or refuses (401/403), that is the answer, in seconds."""
    use_job_defaults()
    from mlflow.tracking import MlflowClient

    uri = absolute_sqlite(uri)
    db = sqlite_path(uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
        if db.name and db.name != ":memory:":
            retry(check_sqlite, db)
        else:
            db = None
    with _store_lock(db):  # the first opening of a new SQLite file creates its schema: one job at a time
        if db is not None and _has_no_tables(db):  # its schema and Default experiment as `mlflow server`
            _new_store(db)                          # makes them: no absolute ./mlruns
        mlflow_client = MlflowClient(tracking_uri=uri)
        if db is not None:
            retry(mlflow_client.search_experiments, max_results=1)
    if first_contact and uri.startswith(("http://", "https://")):
        timeout = min(float(os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT") or 30), FIRST_CONTACT_TIMEOUT_S)
        try:
            with _environ(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT=str(max(1, int(timeout)))):
                mlflow_client.search_experiments(max_results=1)
            return mlflow_client
        except Exception as exc:
            if not retryable(exc, answered=False):
                raise
            print(f"tracking: {uri} answered with a transient error ({summary(exc)}); retrying", file=sys.stderr,
                  flush=True)
    if db is None:
        retry(mlflow_client.search_experiments, max_results=1)
    return mlflow_client


@contextlib.contextmanager
def _store_lock(db: Path | None):
    """Hold ``<db>.lock`` while MLflow opens a SQLite store: the first opening creates its tables and
    migrates them, and two tracking jobs doing that at once (an experiments fan-out starts one per run)
    break each other ("table ... already exists"). No lock for a server: it serialises that itself."""
    if db is None:
        yield
        return
    import fcntl

    with open(db.with_name(db.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _new_store(db: Path) -> None:
    """Give the empty SQLite file ``db`` MLflow's tables and Default experiment: a copy of an empty store this
    MLflow version made once in the user's cache (creating the tables runs MLflow's ~50 schema migrations, seconds
    at every new run folder; a copy takes milliseconds). Without a writable cache the store is made in place."""
    from mlflow.version import VERSION

    template = store_template_folder() / f"mlflow-{VERSION}.db"
    if not template.exists():
        made = template.with_name(f".{template.name}.{os.getpid()}.tmp")
        try:
            template.parent.mkdir(parents=True, exist_ok=True)
            _create_store(made)
            os.replace(made, template)  # whole or absent: never a half-made template
        except OSError:
            _create_store(db)
            return
        finally:
            made.unlink(missing_ok=True)  # what a failed attempt left (gone once replaced)
    copy = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    shutil.copyfile(template, copy)
    os.replace(copy, db)


def _create_store(db: Path) -> None:
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = retry(SqlAlchemyStore, f"sqlite:///{db.resolve()}", f"{PROXIED_SCHEME}/")
    store.engine.dispose()


def store_template_folder() -> Path:
    """$XDG_CACHE_HOME/rewardloop/mlflow_store (~/.cache/rewardloop/mlflow_store by default)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rewardloop" / "mlflow_store"


def _has_no_tables(db: Path) -> bool:
    import sqlite3

    conn = sqlite3.connect(str(db))
    try:
        return conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0] == 0
    finally:
        conn.close()


def artifacts_root(uri: str) -> Path | None:
    """Where a SQLite store's proxied artifacts live: ``mlartifacts/`` beside the database file,
    relative when the URI is (MLflow would pick ./mlruns, as an absolute path); None for servers."""
    db = sqlite_path(uri)
    return None if db is None else db.parent / ARTIFACTS_DIR


def artifact_location(uri: str, name: str) -> str | None:
    """A new experiment's artifact location: for a SQLite store ``mlflow-artifacts:/<name>``, resolved by
    whoever serves the folder (no absolute path is stored); a server decides its own (None)."""
    if artifacts_root(uri) is None:
        return None
    return f"{PROXIED_SCHEME}/" + (re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "experiment")

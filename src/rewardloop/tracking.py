"""MLflow tracking of a workflow run, from the artifacts the stages leave (the stages never import mlflow).

* ``start_parent_run`` (rule tracking_run, local, once per results folder): creates the experiment
  when missing (tagged as a model-training experiment, so that MLflow 3 opens its runs, not its GenAI
  pages) and ONE parent run; writes its id to ``results/tracking/run.json``. Params of the parent run
  are the flattened config; tags are the git commit, the rewardloop version and the model.
* ``track_iteration`` (rule track_iteration): finds (by tags) or creates the child run ``iter_XXX``
  and logs the iteration's metrics (step = iteration), reward statistics from the Parquet tables,
  the training curves (step = global optimizer step) and the image grids; the per-iteration metrics
  and the curves also go into the parent run, so that it shows one curve over all iterations.
* ``track_base``: the base model's eval at step -1 into the parent run.

Relocatable. The default store is ``sqlite:///results/mlflow.db``, relative to the working
directory, and an experiment it creates keeps its artifacts at ``mlflow-artifacts:/<experiment>``,
which an MLflow server resolves under its ``--artifacts-destination`` (``mlartifacts/`` beside the
database; these jobs write there directly). So no stored URI holds the folder's absolute path: a
results folder moved or copied elsewhere opens with every image in ``mlflow ui --backend-store-uri
sqlite:///<results>/mlflow.db --artifacts-destination <results>/mlartifacts``.

Durations. A run's start and end are those of the work it records: a child's from its stages'
files (mtime minus the job's wall time), the parent's end moves to the latest one logged.
Metric names are unique: a reward column that is a copy of the combined ``reward`` (a single reward of
weight 1) is logged once, as ``reward``; the learning rate once, as the per-step curve ``train/lr``.

Every logged value carries a timestamp derived from its source file's mtime, so a rerun logs the
same rows again, which MLflow deduplicates. ``snakemake --forcerun <rule>`` logs again.

Failures. Tracking never fails a job, and the artifacts of the stages are only read: the marker JSON
gets ``status: failed``, the ``reason`` (and a short ``summary``), ``retryable`` and ``seconds``.
Errors are told apart (``retryable``): a locked SQLite database is retried with backoff (``retry``),
a server that answered before gets MLflow's own HTTP retries; an unusable store fails at once: a
SQLite file that cannot be opened for writing (checked with ``sqlite3`` before MLflow, whose engine
setup would retry that for ~100 s), a missing folder, an unknown URI scheme, 401/403, and a server
that cannot be reached at the first call of the run (``tracking_run`` asks it without retries). Only
``tracking_run`` pays for that: without a parent run the later jobs write ``status: skipped`` with
the reason and touch no store. At the end of the run the Snakefile prints ``report``'s one line when
a marker says failed (naming the URI, the cause and the marker).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable, Iterable, Mapping

import pandas as pd

from rewardloop import __version__

from rewardloop.models import loading as models
from rewardloop.artifacts import benchmark_seconds, write_json
from rewardloop.experiments import RUN_KEY as FANOUT_RUN_KEY
from rewardloop.monitors.history import guard_cell

DEFAULT_TRACKING_URI = "sqlite:///results/mlflow.db"
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
TAG_ROLE, TAG_PARENT, TAG_ITERATION = "rewardloop.role", "rewardloop.parent_run_id", "rewardloop.iteration"
TAG_EXPERIMENT, TAG_SEED = "rewardloop.experiment", "rewardloop.seed"  # a fan-out's run (rewardloop.experiments)
TAG_GUARD = "rewardloop.guard"  # the reward-hacking guard's verdict (rules/monitors.smk)
MAX_PARAM_VAL_LENGTH, MAX_KEY_LENGTH, MAX_TAG_VAL_LENGTH = 6000, 250, 8000  # mlflow.utils.validation
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
FIRST_CONTACT_TIMEOUT_S = 10
ARTIFACTS_DIR = "mlartifacts"  # beside a SQLite store: what `--artifacts-destination` names
PROXIED_SCHEME = "mlflow-artifacts:"
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}  # MLflow 3: the model-training view
NOT_LOGGED = {"train/learning_rate"}  # the peak of the `train/lr` curve, which is logged

# Defaults for a job that talks to a server: fail within about a minute, not the 7 retries of
# MLflow's default; the user's own settings win. No telemetry from a job.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

retry_stats = {"calls": 0, "retries": 0, "waited_s": 0.0}


class TrackingError(RuntimeError):
    pass


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` when set, else ``sqlite:///results/mlflow.db`` (relative to the workdir)."""
    return os.environ.get(ENV_TRACKING_URI) or DEFAULT_TRACKING_URI


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
    from mlflow.tracking import MlflowClient

    db = None
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):].split("?")[0])
        db.parent.mkdir(parents=True, exist_ok=True)
        if db.name and db.name != ":memory:":
            retry(check_sqlite, db)
        else:
            db = None
    with _store_lock(db):  # the first opening of a new SQLite file creates its schema: one job at a time
        if db is not None and _has_no_tables(db):  # its schema and Default experiment as `mlflow server`
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # makes them: no absolute ./mlruns

            retry(SqlAlchemyStore, uri, f"{PROXIED_SCHEME}/")
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
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):].split("?")[0]).parent / ARTIFACTS_DIR
    return None


def artifact_location(uri: str, name: str) -> str | None:
    """A new experiment's artifact location: for a SQLite store ``mlflow-artifacts:/<name>``, resolved by
    whoever serves the folder (no absolute path is stored); a server decides its own (None)."""
    if artifacts_root(uri) is None:
        return None
    return f"{PROXIED_SCHEME}/" + (re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "experiment")


def get_or_create_experiment(mlflow_client, name: str, uri: str) -> str:
    experiment = retry(mlflow_client.get_experiment_by_name, name)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            raise TrackingError(f"experiment {name!r} is deleted; restore it or set tracking.experiment")
        experiment_id = experiment.experiment_id
    else:
        try:
            experiment_id = retry(mlflow_client.create_experiment, name,
                                  artifact_location=artifact_location(uri, name), tags=EXPERIMENT_KIND)
        except Exception:  # another process created it meanwhile
            experiment = retry(mlflow_client.get_experiment_by_name, name)
            if experiment is None:
                raise
            experiment_id = experiment.experiment_id
    if experiment is not None and experiment.tags.get("mlflow.experimentKind") != EXPERIMENT_KIND["mlflow.experimentKind"]:
        for key, value in EXPERIMENT_KIND.items():  # an experiment made before (or by MLflow's UI)
            retry(mlflow_client.set_experiment_tag, experiment_id, key, value)
    return experiment_id


# ---------------------------------------------------------------------------------------- values


def flatten(obj, prefix: str = "") -> dict[str, str]:
    """Nested config → {"train.lora.rank": "8", ...}; keys and values cut to MLflow's limits."""
    flat = {}
    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif prefix:
        text = obj if isinstance(obj, str) else json.dumps(obj, default=str)
        flat[prefix[:MAX_KEY_LENGTH]] = text[:MAX_PARAM_VAL_LENGTH]
    return flat


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _mtime_ms(path) -> int:
    return int(Path(path).stat().st_mtime * 1000)


def stage_metrics(stage: str, metrics: Mapping) -> dict[str, float]:
    """The numeric entries of a stage's metrics JSON; plain keys get the stage as prefix."""
    out = {}
    for key, value in metrics.items():
        if key in ("iteration", "history") or key in NOT_LOGGED:
            continue
        number = _number(value)
        if number is not None:
            if key == "perf/model_load_time":  # generate and train both load a model
                key = f"perf/model_load_time/{stage}"
            out[key if "/" in key else f"{stage}/{key}"] = number
    return out


def reward_copies(frame: pd.DataFrame) -> set[str]:
    """The ``reward_<name>`` columns equal to ``reward`` row for row (a single reward of weight 1 is
    the combined reward): MLflow gets those values once, under ``reward``."""
    components = [c for c in frame.columns if c.startswith("reward_") and c != "reward_details"]
    if "reward" not in frame:
        return set()
    return {c for c in components if frame[c].astype(float).equals(frame["reward"].astype(float))}


def reward_columns(frame: pd.DataFrame) -> list[str]:
    copies = reward_copies(frame)
    return [c for c in frame.columns
            if c == "reward" or (c.startswith("reward_") and c != "reward_details" and c not in copies)]


def without_copies(points: list, copies: Mapping[str, set[str]]) -> list:
    """``points`` but those of a copied column: ``{"eval": {"reward_color_match"}}`` drops
    ``eval/reward_color_match/mean`` and the other statistics of that column."""
    def kept(key: str) -> bool:
        prefix, _, rest = key.partition("/")
        return rest.split("/")[0] not in copies.get(prefix, ())

    return [p for p in points if kept(p[0])]


def table_points(path, prefix: str, step: int, raw: bool) -> tuple[list, set[str]]:
    """The reward distribution of a scores (``raw``) or eval table as points at ``step``, and its
    copied columns. Eval's mean and std are not among them: eval.json has those already."""
    frame = pd.read_parquet(path).drop(columns=["image", "reward_details"], errors="ignore")
    ts = _mtime_ms(path)
    points = [(k, v, ts, step) for k, v in reward_distribution(frame, prefix, raw=raw).items()
              if raw or not k.endswith(("/mean", "/std"))]
    return points, reward_copies(frame)


def reward_distribution(frame: pd.DataFrame, prefix: str, raw: bool) -> dict[str, float]:
    """mean/std/min/max/quantiles of the combined reward and of each component."""
    tag = "raw_" if raw else ""
    out = {}
    for column in reward_columns(frame):
        values = frame[column].astype(float)
        if values.empty:
            continue
        out[f"{prefix}/{column}/{tag}mean"] = float(values.mean())
        out[f"{prefix}/{column}/{tag}std"] = float(values.std(ddof=0))
        out[f"{prefix}/{column}/{tag}min"] = float(values.min())
        out[f"{prefix}/{column}/{tag}max"] = float(values.max())
        for q in QUANTILES:
            out[f"{prefix}/{column}/{tag}q{int(q * 100):02d}"] = float(values.quantile(q))
    return out


def train_curve(history: list[Mapping], iteration: int, steps_per_iteration: int, end_ms: int):
    """[(key, value, timestamp_ms, global_step)] of a train.json history.

    Global step = iteration * steps_per_iteration + step, so the curves of consecutive iterations
    join (when each iteration takes as many steps); timestamps are reconstructed backwards from the
    file's mtime with the per-step times.
    """
    points = []
    remaining = [float(h.get("time") or 0.0) for h in history]
    for i, record in enumerate(history):
        step = iteration * steps_per_iteration + int(record.get("step", i))
        ts = end_ms - int(1000 * sum(remaining[i + 1:]))
        for key, value in record.items():
            if key in ("step",):
                continue
            name = {"lr": "train/lr", "time": "perf/train_step_time"}.get(key, key)
            number = _number(value)
            if number is not None:
                points.append((name, number, max(ts, 0), step))
    return points


# ------------------------------------------------------------------------------------------ MLflow


def _log(mlflow_client, run_id: str, metrics=(), params: Mapping | None = None, tags: Mapping | None = None):
    """log_batch in chunks below MLflow's limits (1000 metrics, 100 params+tags per call)."""
    from mlflow.entities import Metric, Param, RunTag

    metrics = [Metric(k, v, ts, step) for k, v, ts, step in metrics]
    for start in range(0, len(metrics), 1000):
        retry(mlflow_client.log_batch, run_id, metrics=metrics[start:start + 1000])
    params = [Param(k, v) for k, v in (params or {}).items()]
    for start in range(0, len(params), 100):
        retry(mlflow_client.log_batch, run_id, params=params[start:start + 100])
    tags = [RunTag(k, str(v)[:MAX_TAG_VAL_LENGTH]) for k, v in (tags or {}).items()]
    for start in range(0, len(tags), 100):
        retry(mlflow_client.log_batch, run_id, tags=tags[start:start + 100])


def _log_artifacts(mlflow_client, uri: str, run_id: str, files: Mapping[str, str], artifact_path: str | None = None):
    """Upload ``{name in the run: local file}``: copies under the wanted names, one upload. A run of a
    SQLite store whose artifacts are proxied (``mlflow-artifacts:/...``) gets them written where a
    server of that store resolves them, under ``artifacts_root(uri)``."""
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

    artifact_uri = retry(mlflow_client.get_run, run_id).info.artifact_uri
    root = artifacts_root(uri)
    with tempfile.TemporaryDirectory(prefix="rewardloop-artifacts-") as tmp:
        for name, source in files.items():
            shutil.copyfile(source, Path(tmp) / name)
        if root is not None and artifact_uri.startswith(PROXIED_SCHEME):
            LocalArtifactRepository(str(root / artifact_uri[len(PROXIED_SCHEME):].lstrip("/"))).log_artifacts(
                tmp, artifact_path)
        else:
            retry(mlflow_client.log_artifacts, run_id, tmp, artifact_path)
    return sorted(files)


def _span_ms(files: Mapping[str, str], benchmarks: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(start, end) in ms of the work that wrote ``files`` ({stage: path}): the earliest mtime less its
    job's wall time (``benchmarks``: {stage: TSV}), the latest mtime."""
    ends = {key: _mtime_ms(path) for key, path in files.items()}
    starts = [end - int(1000 * (benchmark_seconds((benchmarks or {}).get(key, "")) or 0)) for key, end in ends.items()]
    return min(starts), max(ends.values())


def _extend_parent(mlflow_client, run_id: str, end_ms: int) -> None:
    """The parent run ends with the latest work logged into it (it would read a few ms otherwise)."""
    info = retry(mlflow_client.get_run, run_id).info
    retry(mlflow_client.set_terminated, run_id, "FINISHED", end_time=max(end_ms, info.end_time or 0, info.start_time))


def git_commit(repo: str | os.PathLike | None) -> str | None:
    if not repo:
        return None
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _model_tag(model: Mapping) -> str:
    return models.model_reference({"path": model.get("path")}, model.get("init_lora"))


class Skipped(TrackingError):
    """No parent run (tracking_run failed): a later tracking job does nothing but say so."""


def _failure(marker: dict, exc: BaseException, path, started: float, answered: bool = False) -> dict:
    marker.update(status="failed", reason=f"{type(exc).__name__}: {exc}".strip()[:2000], summary=summary(exc),
                  retryable=retryable(exc, answered=answered), seconds=round(time.perf_counter() - started, 3))
    print(f"tracking FAILED (the workflow goes on; `snakemake --forcerun <rule>` logs again; "
          f"{'retryable' if marker['retryable'] else 'not retryable'}, {marker['seconds']:.1f}s): {marker['reason']}",
          file=sys.stderr, flush=True)
    traceback.print_exc()
    write_json(marker, path)
    return marker


def _skipped(marker: dict, exc: Skipped, path, started: float) -> dict:
    marker.update(status="skipped", reason=str(exc), seconds=round(time.perf_counter() - started, 3))
    print(f"tracking skipped: {exc}", file=sys.stderr, flush=True)
    write_json(marker, path)
    return marker


def start_parent_run(config: Mapping, run_json, repo: str | None = None, start_ms: int | None = None) -> dict:
    """Rule tracking_run: create ONE parent run (starting at ``start_ms``, the workflow run's start,
    when known) and write its id (or the failure) to ``run_json``."""
    tracking = config.get("tracking", {})
    uri = tracking_uri()
    marker = {"status": "ok", "tracking_uri": uri, "experiment": tracking.get("experiment", "rewardloop")}
    started, answered = time.perf_counter(), False
    try:
        mlflow_client = client(uri, first_contact=True)
        answered = True
        experiment_id = get_or_create_experiment(mlflow_client, marker["experiment"], uri)
        name = tracking.get("run_name") or Path.cwd().name
        tags = {
            TAG_ROLE: "parent",
            "rewardloop.version": __version__,
            "rewardloop.model": _model_tag(config.get("model", {})),
        }
        fanout = config.get(FANOUT_RUN_KEY)
        if fanout:  # one run of an experiments fan-out: the UI groups and filters by these tags
            name = f"{name} {fanout['name']} seed {fanout['seed']}"
            tags.update({TAG_EXPERIMENT: fanout["name"], TAG_SEED: str(fanout["seed"])})
        commit = git_commit(repo)
        if commit:
            tags["mlflow.source.git.commit"] = commit.removesuffix("-dirty")
            tags["rewardloop.git_commit"] = commit  # "-dirty": tracked files differed from the commit
        run = retry(mlflow_client.create_run, experiment_id, run_name=name, tags=tags, start_time=start_ms)
        run_id = run.info.run_id
        _log(mlflow_client, run_id, params=flatten(dict(config)))
        retry(mlflow_client.set_terminated, run_id, "FINISHED")  # until the first iteration extends it
        marker.update(experiment_id=experiment_id, run_id=run_id, run_name=name,
                      seconds=round(time.perf_counter() - started, 3))
        print(f"tracking: parent run {run_id} ({name}) in experiment {marker['experiment']} at {uri}", flush=True)
    except Exception as exc:
        return _failure(marker, exc, run_json, started, answered)
    write_json(marker, run_json)
    return marker


def _parent(run_json) -> dict:
    parent = json.loads(Path(run_json).read_text())
    if parent.get("status") != "ok" or not parent.get("run_id"):
        raise Skipped(f"no parent run ({run_json}: {parent.get('reason', 'status ' + str(parent.get('status')))}); "
                      "rerun with `snakemake --forcerun tracking_run`")
    uri = tracking_uri()
    if uri != parent["tracking_uri"]:
        raise TrackingError(f"tracking URI is {uri} but the parent run lives at {parent['tracking_uri']}; "
                            "rerun with `snakemake --forcerun tracking_run`")
    return parent


def find_or_create_child(mlflow_client, parent: Mapping, iteration: int, start_ms: int | None = None) -> str:
    """The child run of ``iteration`` under the parent (found by tags, so reruns reuse it); a new one
    starts at ``start_ms``."""
    query = f"tags.`{TAG_PARENT}` = '{parent['run_id']}' and tags.`{TAG_ITERATION}` = '{iteration}'"
    found = retry(mlflow_client.search_runs, [parent["experiment_id"]], filter_string=query, max_results=1)
    if found:
        return found[0].info.run_id
    tags = {
        "mlflow.parentRunId": parent["run_id"],
        TAG_PARENT: parent["run_id"],
        TAG_ITERATION: str(iteration),
        TAG_ROLE: "iteration",
        "rewardloop.version": __version__,
    }
    run = retry(mlflow_client.create_run, parent["experiment_id"], run_name=f"iter_{iteration:03d}", tags=tags,
                start_time=start_ms)
    return run.info.run_id


def steps_taken(train_metrics: Mapping) -> int:
    """The optimizer steps the train stage took (train.json's ``steps``: its history's length). Not
    ``train.steps``: GRPO, NFT and AWM plan theirs from the data (samples, batch size, inner epochs)."""
    return int(train_metrics.get("steps", len(train_metrics.get("history") or [])))


def iteration_points(iteration: int, metrics_files: Mapping[str, str], tables: Mapping[str, str],
                     benchmarks: Mapping[str, str], steps_per_iteration: int | None = None):
    """(per-iteration points at step=iteration, training-curve points at global steps).

    ``steps_per_iteration``: the global step's stride; None: the optimizer steps the train stage took."""
    points, curve = [], []
    wall_total = 0.0
    for stage, path in metrics_files.items():
        metrics = json.loads(Path(path).read_text())
        ts = _mtime_ms(path)
        points += [(k, v, ts, iteration) for k, v in stage_metrics(stage, metrics).items()]
        if stage == "train" and metrics.get("history"):
            stride = steps_taken(metrics) if steps_per_iteration is None else steps_per_iteration
            curve = train_curve(metrics["history"], iteration, stride, ts)
        bench = benchmark_seconds(benchmarks.get(stage, ""))
        if bench is not None:
            points.append((f"perf/wall/{stage}", bench, ts, iteration))
            wall_total += bench if stage != "eval" else 0.0  # eval runs beside the loop
    if wall_total:
        points.append(("perf/wall/iteration", wall_total, _mtime_ms(metrics_files["export"]), iteration))
    copies = {}
    for prefix, name in (("rollout", "scores"), ("eval", "eval")):
        if name in tables:
            more, copies[prefix] = table_points(tables[name], prefix, iteration, raw=prefix == "rollout")
            points += more
    return without_copies(points, copies), curve


def track_iteration(run_json, iteration: int, metrics_files: Mapping[str, str], tables: Mapping[str, str],
                    grids: Mapping[str, str], benchmarks: Mapping[str, str], steps_per_iteration: int | None,
                    marker_path) -> dict:
    """Rule track_iteration: log one iteration into its child run (and the curves into the parent);
    ``steps_per_iteration`` as for :func:`iteration_points` (the rule passes None)."""
    marker = {"status": "ok", "iteration": iteration}
    started = time.perf_counter()
    try:
        parent = _parent(run_json)
        marker.update(tracking_uri=parent["tracking_uri"], parent_run_id=parent["run_id"],
                      experiment_id=parent["experiment_id"])
        points, curve = iteration_points(iteration, metrics_files, tables, benchmarks, steps_per_iteration)
        start_ms, end_ms = _span_ms(metrics_files, benchmarks)
        mlflow_client = client(parent["tracking_uri"])
        run_id = find_or_create_child(mlflow_client, parent, iteration, start_ms)
        marker["run_id"] = run_id
        retry(mlflow_client.update_run, run_id, status="RUNNING")
        _log(mlflow_client, run_id, metrics=points + curve, params={"iteration": str(iteration)})
        _log(mlflow_client, parent["run_id"], metrics=points + curve)
        marker["artifacts"] = _log_artifacts(mlflow_client, parent["tracking_uri"], run_id, grids)
        retry(mlflow_client.set_terminated, run_id, "FINISHED", end_time=end_ms)
        _extend_parent(mlflow_client, parent["run_id"], end_ms)
        marker["metrics"] = sorted({p[0] for p in points})
        marker["train_curve"] = {"points": len(curve),
                                 "steps": [min((p[3] for p in curve), default=None),
                                           max((p[3] for p in curve), default=None)]}
        marker["retries"] = retry_stats["retries"]
        marker["seconds"] = round(time.perf_counter() - started, 3)
        print(f"tracking: iteration {iteration} -> run {run_id}: {len(points)} values, "
              f"{len(curve)} curve points, artifacts {marker['artifacts']}", flush=True)
    except Skipped as exc:
        return _skipped(marker, exc, marker_path, started)
    except Exception as exc:
        return _failure(marker, exc, marker_path, started, answered=True)
    write_json(marker, marker_path)
    return marker


def track_base(run_json, metrics_file, table, grid, benchmark, marker_path,
               guidance_metrics: Mapping[str, str] | None = None) -> dict:
    """Rule track_base: the base model's eval into the parent run at step -1, and its evals at the
    further guidance scales of ``eval.also_at_guidance`` (``{name: metrics JSON}``)."""
    marker = {"status": "ok", "iteration": -1}
    started = time.perf_counter()
    try:
        parent = _parent(run_json)
        marker.update(tracking_uri=parent["tracking_uri"], run_id=parent["run_id"])
        metrics = json.loads(Path(metrics_file).read_text())
        ts = _mtime_ms(metrics_file)
        points = [(k, v, ts, -1) for k, v in stage_metrics("eval", metrics).items()]
        for name, path in (guidance_metrics or {}).items():
            points += [(k, v, _mtime_ms(path), -1) for k, v in stage_metrics(name, json.loads(Path(path).read_text())).items()]
        more, copies = table_points(table, "eval", -1, raw=False)
        points = without_copies(points + more, {"eval": copies})
        bench = benchmark_seconds(benchmark)
        if bench is not None:
            points.append(("perf/wall/eval", bench, ts, -1))
        mlflow_client = client(parent["tracking_uri"])
        _log(mlflow_client, parent["run_id"], metrics=points)
        marker["artifacts"] = _log_artifacts(mlflow_client, parent["tracking_uri"], parent["run_id"],
                                             {"eval_grid.png": grid}, "base")
        _extend_parent(mlflow_client, parent["run_id"], _span_ms({"eval": metrics_file, "table": table})[1])
        marker["metrics"] = sorted({p[0] for p in points})
        marker["seconds"] = round(time.perf_counter() - started, 3)
        print(f"tracking: base eval -> parent run {parent['run_id']}: {len(points)} values", flush=True)
    except Skipped as exc:
        return _skipped(marker, exc, marker_path, started)
    except Exception as exc:
        return _failure(marker, exc, marker_path, started, answered=True)
    write_json(marker, marker_path)
    return marker


def monitor_points(iteration: int, health_path, gold_paths: Iterable[str]) -> list:
    """health/<source>/<statistic> of a health.parquet and gold/<name>/mean (and rollout_mean) of each
    rescore JSON, at step = iteration (-1: the base model)."""
    import pyarrow.parquet as pq

    points = []
    ts = _mtime_ms(health_path)
    for row in pq.read_table(health_path).to_pylist():
        points += [(f"health/{row['source']}/{k}", float(v), ts, iteration) for k, v in row.items()
                   if k not in ("iteration", "source", "images") and _number(v) is not None]
    return points + [p for path in gold_paths for p in _gold_points(path, iteration)]


def _log_to_parent_and_child(parent: Mapping, iteration: int, points: list, child_tags: Mapping) -> None:
    """``points`` into the parent run and the iteration's child run (none for the base model, -1); the
    child gets ``child_tags``, the parent a guard breach as ``iteration N breach: ...``."""
    mlflow_client = client(parent["tracking_uri"])
    _log(mlflow_client, parent["run_id"], metrics=points)
    if iteration >= 0:
        _log(mlflow_client, find_or_create_child(mlflow_client, parent, iteration), metrics=points, tags=child_tags)
    if child_tags.get(TAG_GUARD, "ok") != "ok":
        _log(mlflow_client, parent["run_id"], tags={TAG_GUARD: f"iteration {iteration} {child_tags[TAG_GUARD]}"})


def log_gold(run_json, iteration: int, gold_paths: list[str]) -> None:
    """`rewardloop rescore`: gold/<name>/... of rescore JSONs into a tracked run, as rule track_monitors logs them."""
    points = [p for path in gold_paths for p in _gold_points(path, iteration)]
    _log_to_parent_and_child(_parent(run_json), iteration, points, {})


def _gold_points(path, iteration: int) -> list:
    values = json.loads(Path(path).read_text())
    return [(k, float(v), _mtime_ms(path), iteration) for k, v in values.items() if k.startswith("gold/")]


def track_monitors(run_json, iteration: int, health_path, gold_paths: list[str], verdict_path, marker_path) -> dict:
    """Rule track_monitors: a folder's health and gold rewards into the parent run (and the iteration's
    child run), the guard's verdict as tag ``rewardloop.guard`` (on the parent: the last breach)."""

    def log(marker: dict) -> None:
        parent = _parent(run_json)
        marker.update(tracking_uri=parent["tracking_uri"], parent_run_id=parent["run_id"])
        points = monitor_points(iteration, health_path, gold_paths)
        tags = {TAG_GUARD: guard_cell(json.loads(Path(verdict_path).read_text()))} if verdict_path else {}
        _log_to_parent_and_child(parent, iteration, points, tags)
        marker.update(metrics=sorted({p[0] for p in points}), tags=tags)
        print(f"tracking: monitors of {'the base model' if iteration < 0 else f'iteration {iteration}'}: "
              f"{len(points)} values{', guard ' + tags[TAG_GUARD] if tags else ''}", flush=True)

    return _marked({"status": "ok", "iteration": iteration}, marker_path, log)


def _marked(marker: dict, marker_path, log: Callable[[dict], None]) -> dict:
    """Run ``log(marker)``; write the marker (``seconds`` added), or the skipped/failed one, never raising."""
    started = time.perf_counter()
    try:
        log(marker)
    except Skipped as exc:
        return _skipped(marker, exc, marker_path, started)
    except Exception as exc:
        return _failure(marker, exc, marker_path, started, answered=True)
    marker["seconds"] = round(time.perf_counter() - started, 3)
    write_json(marker, marker_path)
    return marker


def iter_names(paths: Iterable[str]) -> dict[str, str]:
    """{stage: path} of metrics/<stage>.json paths."""
    return {Path(p).stem: str(p) for p in paths}


# --------------------------------------------------------------------------------- end of the run


def markers(results_dir: str | os.PathLike = "results") -> list[Path]:
    """The tracking markers under ``results_dir``: run.json first, then base, then the iterations."""
    results = Path(results_dir)
    found = [results / "tracking/run.json", results / "base/tracking.json"]
    return [p for p in found if p.is_file()] + sorted(results.glob("iter_*/tracking.json"))


def _without_password(uri: str | None) -> str | None:
    """``http://user:secret@host`` → ``http://***@host`` (the line goes to a console)."""
    if not uri or "://" not in uri or "@" not in uri.split("/", 3)[2]:
        return uri
    scheme, rest = uri.split("://", 1)
    return f"{scheme}://***@{rest.split('@', 1)[1]}"


def failure_line(results_dir: str | os.PathLike = "results") -> str | None:
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


def report(results_dir: str | os.PathLike = "results", file=None) -> str | None:
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

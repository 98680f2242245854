"""MLflow tracking of a workflow run, from the artifacts the stages leave (the stages never import mlflow).

* ``start_parent_run`` (rule tracking_run, local, once per results folder): creates the experiment
  when missing and ONE parent run, named after the run (``tracking.run_name``, else the recipe's
  model, rewards and objective and the date it started) and described (``mlflow.note.content``: where
  the iterations, the base model and the images are); writes its id to ``results/tracking/run.json``.
  Params of the parent run are the flattened config; tags are the git commit, the rewardloop version
  and the model.
* ``track_iteration`` (rule track_iteration): finds (by tags) or creates the child run ``iter_XXX``
  and logs the iteration's metrics (step = iteration), reward statistics from the Parquet tables,
  the training curves (step = global optimizer step) and the image grids; the per-iteration metrics
  and the curves also go into the parent run, so that it shows one curve over all iterations; and
  its monitors (``log_monitors``): health, gold rewards and the guard's verdict (tag ``rewardloop.guard``).
* ``track_base`` (rule track_base): the base model's eval and monitors at step -1 into the parent run.

Relocatable. The default store is ``sqlite:///results/mlflow.db``, relative to the working
directory, and an experiment it creates keeps its artifacts at ``mlflow-artifacts:/<experiment>``,
which an MLflow server resolves under its ``--artifacts-destination`` (``mlartifacts/`` beside the
database; these jobs write there directly). So no stored URI holds the folder's absolute path: a
results folder moved or copied elsewhere opens with every image in ``mlflow ui --backend-store-uri
sqlite:///<results>/mlflow.db --artifacts-destination <results>/mlartifacts`` (``browse`` prints the
address of its runs table).

Durations. A run's start and end are those of the work it records: a child's from its stages'
files (mtime minus the job's wall time), the parent's end moves to the latest one logged.

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

By concern: ``errors`` (what an error means, retries), ``store`` (the URI, a client, SQLite's
bootstrap and lock), ``points`` (artifacts to values, pure), ``runs`` (the MLflow runs and logging
into them), ``markers`` (each job's marker, the end-of-run line), ``jobs`` (the rules' work),
``browse`` (the UI's address). Importing the package changes no environment variable.
"""

from rewardloop.tracking.errors import Skipped, TrackingError, retry, retry_stats, retryable, summary
from rewardloop.tracking.jobs import (Monitors, log_benchmarks, log_gold, log_monitors, start_parent_run, track_base,
                                      track_iteration)
from rewardloop.tracking.markers import failure_line, markers, marking, report
from rewardloop.tracking.points import flatten, iter_names, iteration_points, monitor_points
from rewardloop.tracking.runs import (TAG_GUARD, TAG_ITERATION, TAG_NOTE, TAG_PARENT, TAG_ROLE, find_or_create_child,
                                      get_or_create_experiment, iteration_grids, parent_run_name)
from rewardloop.tracking.store import DEFAULT_TRACKING_URI, ENV_TRACKING_URI, client, tracking_uri

__all__ = [
    "DEFAULT_TRACKING_URI", "ENV_TRACKING_URI", "Monitors", "Skipped", "TAG_GUARD", "TAG_ITERATION", "TAG_NOTE", "TAG_PARENT",
    "TAG_ROLE", "TrackingError", "client", "failure_line", "find_or_create_child", "flatten",
    "get_or_create_experiment", "iter_names", "iteration_grids", "iteration_points", "log_benchmarks", "log_gold",
    "log_monitors", "markers",
    "marking", "monitor_points", "parent_run_name", "report", "retry", "retry_stats", "retryable",
    "start_parent_run", "summary", "track_base", "track_iteration", "tracking_uri",
]

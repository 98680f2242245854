"""MLflow runs of a workflow run: the experiment, ONE parent run (its name, description and tags), a
child run per iteration found by its tags, and the logging into them (values in chunks below MLflow's
limits, artifacts where a server of the store resolves them, a parent that lasts as long as its work).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Mapping

from rewardloop import __version__
from rewardloop import results_layout as layout
from rewardloop.experiments import RUN_KEY as FANOUT_RUN_KEY
from rewardloop.models import loading as models
from rewardloop.tracking.errors import Skipped, TrackingError, retry
from rewardloop.tracking.points import flatten
from rewardloop.tracking.store import PROXIED_SCHEME, artifact_location, artifacts_root, tracking_uri

TAG_ROLE, TAG_PARENT, TAG_ITERATION = "rewardloop.role", "rewardloop.parent_run_id", "rewardloop.iteration"
TAG_EXPERIMENT, TAG_SEED = "rewardloop.experiment", "rewardloop.seed"  # a fan-out's run (rewardloop.experiments)
TAG_GUARD = "rewardloop.guard"  # the reward-hacking guard's verdict (rules/monitors.smk)
TAG_NOTE = "mlflow.note.content"  # what MLflow's UI shows as a run's description
MAX_TAG_VAL_LENGTH = 8000  # mlflow.utils.validation
# MLflow 3's kind of experiment. Its UI (3.17) no longer reads it: the view follows the browser's
# workflowType (see browse.py); kept for the clients and hosted UIs that do.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
# An iteration's image grids, by their names in its child run.
ROLLOUT_GRID, EVAL_GRID = "rollout_grid.png", "eval_grid.png"


def iteration_grids(grid, eval_grid) -> dict[str, str]:
    """{name in the child run: local file} of an iteration's rollout and eval grids."""
    return {ROLLOUT_GRID: str(grid), EVAL_GRID: str(eval_grid)}


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


# ------------------------------------------------------------------------------------ the parent run


def recipe_title(config: Mapping) -> str:
    """What the run trains, in the recipes' own order (``configs/sd15_pickscore_dpo.yaml``): the model
    folder's name, the rewards, the objective, e.g. ``tiny-sd15 color_match dpo``."""
    model = Path(str((config.get("model") or {}).get("path") or "model")).name
    rewards = "+".join(name for name, value in (config.get("rewards") or {}).items() if value is not None)
    loss = (config.get("train") or {}).get("loss")
    return " ".join(part for part in (model, rewards, loss) if part)


def parent_run_name(config: Mapping, start_ms: int | None = None) -> str:
    """``tracking.run_name``, else the recipe's title and the local date and minute the workflow run
    started (``start_ms``; now when unknown), e.g. ``tiny-sd15 color_match dpo 2025-06-01 14:03``: a
    run folder moved elsewhere keeps the name. A fan-out's run adds ``<experiment> seed <s>``."""
    name = (config.get("tracking") or {}).get("run_name")
    if not name:
        started = time.localtime((start_ms / 1000) if start_ms is not None else None)
        name = f"{recipe_title(config)} {time.strftime('%Y-%m-%d %H:%M', started)}"
    fanout = config.get(FANOUT_RUN_KEY)
    if fanout:
        name = f"{name} {fanout['name']} seed {fanout['seed']}"
    return name


def parent_description(config: Mapping) -> str:
    """The parent run's description (Markdown): where its iterations, base model and images are."""
    first = layout.iteration_name(0)
    return (f"rewardloop run: {recipe_title(config)}.\n\n"
            f"- Each iteration is a child run (`{first}`, `{layout.iteration_name(1)}`, ...): expand this run in the "
            "runs table. This run holds every iteration's metrics at step = iteration and the training curves "
            "at global optimizer steps.\n"
            f"- Step {layout.BASE_ITERATION} is the base model, before any training (its eval grid: this run's "
            f"Artifacts, `{layout.BASE}/{EVAL_GRID}`).\n"
            f"- Image grids: each child's Artifacts, `{ROLLOUT_GRID}` (the iteration's samples) and `{EVAL_GRID}` "
            "(the held-out prompts).\n"
            "- Params: the whole config, flattened (`train.lora.rank`, ...).")


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


def parent_tags(config: Mapping, repo: str | os.PathLike | None) -> dict[str, str]:
    """The parent run's tags: role, version, model, description, a fan-out's experiment and seed, the commit."""
    tags = {
        TAG_ROLE: "parent",
        "rewardloop.version": __version__,
        "rewardloop.model": _model_tag(config.get("model", {})),
        TAG_NOTE: parent_description(config),
    }
    fanout = config.get(FANOUT_RUN_KEY)
    if fanout:  # one run of an experiments fan-out: the UI groups and filters by these tags
        tags.update({TAG_EXPERIMENT: fanout["name"], TAG_SEED: str(fanout["seed"])})
    commit = git_commit(repo)
    if commit:
        tags["mlflow.source.git.commit"] = commit.removesuffix("-dirty")
        tags["rewardloop.git_commit"] = commit  # "-dirty": tracked files differed from the commit
    return tags


def create_parent_run(mlflow_client, experiment_id: str, config: Mapping, repo: str | os.PathLike | None,
                      start_ms: int | None) -> tuple[str, str]:
    """(run id, name) of a new parent run with the flattened config as params; FINISHED until the first
    iteration extends it."""
    name = parent_run_name(config, start_ms)
    run = retry(mlflow_client.create_run, experiment_id, run_name=name, tags=parent_tags(config, repo),
                start_time=start_ms)
    run_id = run.info.run_id
    log_values(mlflow_client, run_id, params=flatten(dict(config)))
    retry(mlflow_client.set_terminated, run_id, "FINISHED")
    return run_id, name


def read_parent(run_json) -> dict:
    """The parent run's marker, refused when tracking_run did not make it (:class:`Skipped`) or made it
    in another store than today's URI."""
    parent = json.loads(Path(run_json).read_text())
    if parent.get("status") != "ok" or not parent.get("run_id"):
        raise Skipped(f"no parent run ({run_json}: {parent.get('reason', 'status ' + str(parent.get('status')))}); "
                      "rerun with `snakemake --forcerun tracking_run`")
    uri = tracking_uri()
    if uri != parent["tracking_uri"]:
        raise TrackingError(f"tracking URI is {uri} but the parent run lives at {parent['tracking_uri']}; "
                            "rerun with `snakemake --forcerun tracking_run`")
    return parent


def extend_parent(mlflow_client, run_id: str, end_ms: int) -> None:
    """The parent run ends with the latest work logged into it (it would read a few ms otherwise)."""
    info = retry(mlflow_client.get_run, run_id).info
    retry(mlflow_client.set_terminated, run_id, "FINISHED", end_time=max(end_ms, info.end_time or 0, info.start_time))


# ------------------------------------------------------------------------------------ child runs


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
    run = retry(mlflow_client.create_run, parent["experiment_id"], run_name=layout.iteration_name(iteration),
                tags=tags, start_time=start_ms)
    return run.info.run_id


# ------------------------------------------------------------------------------------ logging


def log_values(mlflow_client, run_id: str, metrics=(), params: Mapping | None = None, tags: Mapping | None = None):
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


def log_artifacts(mlflow_client, uri: str, run_id: str, files: Mapping[str, str], artifact_path: str | None = None):
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

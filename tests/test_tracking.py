"""MLflow tracking: a real `mlflow server` and two tiny iterations, the SQLite default, failures, concurrency."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rewardloop import tracking
from workflow_helpers import snakemake as run_snakemake
from workflow_helpers import tiny_overlay, write_overlay

BIN = Path(sys.executable).parent
MLFLOW = str(BIN / "mlflow")
QUIET_ENV = {"HF_HUB_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1",
             "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def overlay(tiny_model, **sections) -> dict:
    return tiny_overlay(tiny_model, eval={"rewards": {"jpeg_compressibility": 1.0}}, **sections)


def snakemake(workdir: Path, env: dict, *args: str):
    return run_snakemake(workdir, *args, env={**QUIET_ENV, **env})


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real tracking server (SQLite backend, proxied artifacts); stopped with its workers at the end.

    Yields a function that waits for GET /health and returns the URL, so that the server boots while
    the tiny model is built."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    cmd = [MLFLOW, "server", "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
           "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1"]
    log = open(root / "server.log", "w")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **QUIET_ENV},
                              start_new_session=True)  # its own process group: workers die with it
    url = f"http://127.0.0.1:{port}"

    def ready() -> str:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        return url
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start:\n{(root / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)

    try:
        yield ready
    finally:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(server.pid, sig)  # the server's group (PID = group id): server and its workers
            except ProcessLookupError:
                break
            try:
                server.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        log.close()


@pytest.fixture(scope="module")
def server_url(mlflow_server, tiny_model):
    return mlflow_server()


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, tiny_model, repo_root, server_url):
    mlflow_server = server_url
    work = tmp_path_factory.mktemp("tracked")
    write_overlay(work, overlay(tiny_model, tracking={"run_name": "tracking-test"}))
    snakemake(work, {"MLFLOW_TRACKING_URI": mlflow_server})
    from mlflow.tracking import MlflowClient

    return work, MlflowClient(tracking_uri=mlflow_server), json.loads((work / "results/tracking/run.json").read_text())


def children(client, parent):
    runs = client.search_runs([parent["experiment_id"]],
                              filter_string=f"tags.`mlflow.parentRunId` = '{parent['run_id']}'")
    return {r.info.run_name: r for r in runs}


def steps(client, run_id, key):
    return [m.step for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


@pytest.mark.workflow
def test_parent_and_child_runs_with_params_tags_and_artifacts(tracked):
    work, client, parent = tracked
    assert parent["status"] == "ok" and parent["tracking_uri"].startswith("http://127.0.0.1:")
    run = client.get_run(parent["run_id"])
    assert run.info.run_name == "tracking-test" and run.info.status == "FINISHED"
    params = run.data.params
    assert params["train.steps"] == "4" and params["iterations"] == "2" and params["tracking.enabled"] == "true"
    assert params["eval.rewards.jpeg_compressibility"] == "1.0"
    assert run.data.tags["rewardloop.version"] and run.data.tags["rewardloop.model"].endswith("tiny-sd15")
    kids = children(client, parent)
    assert sorted(kids) == ["iter_000", "iter_001"]
    for name, child in kids.items():
        assert child.data.tags["rewardloop.iteration"] == str(int(name[-3:]))
        assert child.info.status == "FINISHED"
        assert {a.path for a in client.list_artifacts(child.info.run_id)} >= {"rollout_grid.png", "eval_grid.png"}
        marker = json.loads((work / f"results/{name}/tracking.json").read_text())
        assert marker["status"] == "ok" and marker["run_id"] == child.info.run_id
    assert [a.path for a in client.list_artifacts(parent["run_id"], "base")] == ["base/eval_grid.png"]


@pytest.mark.workflow
def test_metric_histories_have_the_right_steps(tracked):
    work, client, parent = tracked
    kids = children(client, parent)
    # per-iteration metrics: step = iteration, the base eval at -1 in the parent
    assert steps(client, parent["run_id"], "eval/reward/mean") == [-1, 0, 1]
    for key in ("rollout/reward/raw_mean", "rollout/reward/raw_std", "rollout/reward/raw_q50", "pairs/count",
                "pairs/margin_mean", "perf/rollout_time", "perf/score_time", "perf/train_time",
                "perf/wall/train"):
        assert steps(client, parent["run_id"], key) == [0, 1], key
        assert steps(client, kids["iter_001"].info.run_id, key) == [1], key
    for key in ("eval/reward/std", "eval/reward/q50", "eval/reward_jpeg_compressibility/mean"):
        assert steps(client, parent["run_id"], key) == [-1, 0, 1], key
        assert steps(client, kids["iter_000"].info.run_id, key) == [0], key
    # training curves: global optimizer step = iteration * train.steps + step, contiguous
    assert steps(client, parent["run_id"], "train/loss") == list(range(8))
    assert steps(client, kids["iter_000"].info.run_id, "train/implicit_acc") == [0, 1, 2, 3]
    assert steps(client, kids["iter_001"].info.run_id, "train/loss") == [4, 5, 6, 7]
    history = json.loads((work / "results/iter_001/metrics/train.json").read_text())["history"]
    logged = client.get_metric_history(kids["iter_001"].info.run_id, "train/loss")
    assert [m.value for m in sorted(logged, key=lambda m: m.step)] == pytest.approx([h["train/loss"] for h in history])
    scores = pd.read_parquet(work / "results/iter_000/scores.parquet")
    raw_mean = client.get_metric_history(kids["iter_000"].info.run_id, "rollout/reward/raw_mean")[0].value
    assert raw_mean == pytest.approx(scores.reward.mean())


@pytest.mark.workflow
def test_eval_rewards_are_extra_columns(tracked):
    work, _, _ = tracked
    evals = pd.read_parquet(work / "results/iter_001/eval.parquet", columns=None)
    assert {"reward", "reward_color_match", "reward_jpeg_compressibility"} <= set(evals.columns)
    assert evals.reward.to_numpy() == pytest.approx(evals.reward_color_match.to_numpy())  # combined = configured
    metrics = json.loads((work / "results/iter_001/metrics/eval.json").read_text())
    assert metrics["eval/reward/mean"] == pytest.approx(evals.reward.mean())
    assert metrics["eval/reward_jpeg_compressibility/mean"] == pytest.approx(evals.reward_jpeg_compressibility.mean())


@pytest.mark.workflow
def test_report_figures_exist(tracked):
    work, _, _ = tracked
    for rel in ("report/curves.png", "report/config.yaml", "base/eval_grid.png", "iter_000/grid.png",
                "iter_001/eval_grid.png"):
        assert (work / "results" / rel).stat().st_size > 0, rel
    assert yaml.safe_load((work / "results/report/config.yaml").read_text())["train"]["steps"] == 4


@pytest.mark.workflow
def test_forced_rerun_reuses_the_child_run_and_logs_no_duplicates(tracked, repo_root, server_url):
    work, client, parent = tracked
    before = children(client, parent)
    result = snakemake(work, {"MLFLOW_TRACKING_URI": server_url}, "--forcerun", "track_iteration",
                       "--until", "track_iteration")
    assert "track_iteration" in result.stderr
    after = children(client, parent)
    assert {k: r.info.run_id for k, r in after.items()} == {k: r.info.run_id for k, r in before.items()}
    assert steps(client, parent["run_id"], "train/loss") == list(range(8))  # same rows again are deduplicated
    assert steps(client, after["iter_001"].info.run_id, "pairs/count") == [1]


# ---------------------------------------------------------------------------------- without a server


def test_default_tracking_uri_is_sqlite_in_results(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert tracking.tracking_uri() == "sqlite:///results/mlflow.db"
    marker = tracking.start_parent_run({"tracking": {"experiment": "unit"}, "train": {"steps": 3}},
                                       "results/tracking/run.json")
    assert marker["status"] == "ok", marker
    assert (tmp_path / "results/mlflow.db").is_file()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri="sqlite:///results/mlflow.db")
    run = client.get_run(marker["run_id"])
    assert run.data.params["train.steps"] == "3" and run.info.run_name == tmp_path.name
    assert client.get_experiment(marker["experiment_id"]).artifact_location.startswith(
        (tmp_path / "results/mlartifacts").as_uri())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////elsewhere.db")
    assert tracking.tracking_uri() == "sqlite:////elsewhere.db"


def test_flatten_cuts_values_to_mlflow_limits():
    flat = tracking.flatten({"a": {"b": 1, "c": [1, 2]}, "long": "x" * 7000, "none": None, "empty": {}})
    assert flat["a.b"] == "1" and flat["a.c"] == "[1, 2]" and flat["none"] == "null" and flat["empty"] == "{}"
    assert len(flat["long"]) == 6000


@pytest.mark.workflow
def test_unreachable_server_fails_softly(tmp_path, tiny_model, repo_root, monkeypatch):
    """The job succeeds, the marker says failed with the reason; nothing else is touched."""
    dead = f"http://127.0.0.1:{free_port()}"
    env = {"MLFLOW_TRACKING_URI": dead, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "3"}
    write_overlay(tmp_path, overlay(tiny_model))
    snakemake(tmp_path, env, "results/tracking/run.json")
    run = json.loads((tmp_path / "results/tracking/run.json").read_text())
    assert run["status"] == "failed" and "127.0.0.1" in run["reason"], run
    assert "tracking FAILED" in (tmp_path / "results/logs/tracking/run.log").read_text()
    # an iteration whose parent run could not be made: marker failed, no exception
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    metrics = tmp_path / "results/iter_000/metrics"
    metrics.mkdir(parents=True)
    (metrics / "score.json").write_text('{"rollout/reward/raw_mean": 1.0}')
    marker = tracking.track_iteration(tmp_path / "results/tracking/run.json", 0, {"score": str(metrics / "score.json")},
                                      {}, {}, {}, 4, tmp_path / "results/iter_000/tracking.json")
    assert marker["status"] == "failed" and "forcerun tracking_run" in marker["reason"]
    assert json.loads((tmp_path / "results/iter_000/tracking.json").read_text())["status"] == "failed"
    # a parent that exists in run.json but a server that is down
    (tmp_path / "run_ok.json").write_text(json.dumps({"status": "ok", "run_id": "abc", "experiment_id": "1",
                                                      "tracking_uri": dead}))
    marker = tracking.track_iteration(tmp_path / "run_ok.json", 0, {"score": str(metrics / "score.json")}, {}, {}, {},
                                      4, tmp_path / "marker.json")
    assert marker["status"] == "failed" and marker["reason"]


CONCURRENT_LOGGER = textwrap.dedent("""
    import json, sys, time
    from mlflow.entities import Metric
    from rewardloop import tracking
    uri, run_id, worker, batches = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    client = tracking.client(uri)
    started = time.perf_counter()
    for b in range(batches):
        metrics = [Metric(f"w{worker}/m{k}", float(b), 1000 + b, b) for k in range(20)]
        tracking.retry(client.log_batch, run_id, metrics=metrics)
        tracking.retry(client.set_tag, run_id, f"w{worker}", str(b))
    print(json.dumps({**tracking.retry_stats, "seconds": time.perf_counter() - started}))
""")


def test_concurrent_processes_log_into_one_sqlite_file(tmp_path, monkeypatch):
    """Several processes writing at once: no 'database is locked' escapes; retries are counted."""
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = tracking.client(uri)
    experiment = tracking.get_or_create_experiment(client, "concurrency", uri)
    run_id = client.create_run(experiment).info.run_id
    workers, batches = 4, 40
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT_LOGGER, uri, run_id, str(w), str(batches)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **QUIET_ENV}) for w in range(workers)]
    outputs = [p.communicate(timeout=240) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
    stats = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    print("concurrent sqlite logging:", stats)
    data = client.get_run(run_id).data
    assert len(data.metrics) == workers * 20
    assert all(len(client.get_metric_history(run_id, f"w{w}/m0")) == batches for w in range(workers))
    assert all(data.tags[f"w{w}"] == str(batches - 1) for w in range(workers))


def test_retry_backs_off_on_locked_database_only():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "done"

    assert tracking.retry(flaky, base_delay=0.001) == "done" and len(calls) == 3
    with pytest.raises(ValueError):
        tracking.retry(lambda: (_ for _ in ()).throw(ValueError("other")), base_delay=0.001)

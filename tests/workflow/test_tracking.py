"""MLflow tracking: a real `mlflow server` and two tiny iterations, the SQLite default, failures, concurrency."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
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
from rewardloop.artifacts import benchmark_seconds
from rewardloop.runtime import runlock
from rewardloop.tracking import browse
from workflow_helpers import snakemake as run_snakemake
from workflow_helpers import ROOT, SNAKEMAKE, planned_jobs, tiny_overlay, write_overlay

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


@contextlib.contextmanager
def mlflow_process(command: str, *args: str, cwd: Path, log_path: Path):
    """``mlflow <command> <args>`` on a free port of 127.0.0.1, run in ``cwd``; stopped with its workers
    at the end. Yields a function that waits for GET /health and returns the URL (so that a server
    boots while something else is built)."""
    port = free_port()
    cmd = [MLFLOW, command, *args, "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    log = open(log_path, "w")
    server = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **QUIET_ENV},
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
                raise RuntimeError(f"mlflow {command} did not start:\n{log_path.read_text()[-3000:]}")
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
def mlflow_server(tmp_path_factory):
    """A real tracking server (SQLite backend, proxied artifacts)."""
    root = tmp_path_factory.mktemp("mlflow-server")
    with mlflow_process("server", "--backend-store-uri", f"sqlite:///{root}/mlflow.db", "--artifacts-destination",
                        str(root / "artifacts"), cwd=root, log_path=root / "server.log") as ready:
        yield ready


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
    note = run.data.tags["mlflow.note.content"]  # the run's description in MLflow's UI
    assert "`iter_000`" in note and "Step -1 is the base model" in note, note
    assert "`base/eval_grid.png`" in note and "`rollout_grid.png`" in note and "`eval_grid.png`" in note, note
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


# ------------------------------------------------------------ the default store: sqlite:///results/mlflow.db


@pytest.fixture(scope="module")
def sqlite_run(tmp_path_factory, tiny_model, repo_root):
    """A finished run tracked into the default store (no MLFLOW_TRACKING_URI), as `make run` does."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        pytest.skip("MLFLOW_TRACKING_URI is set: the default store is not used")
    work = tmp_path_factory.mktemp("sqlite-run")
    write_overlay(work, overlay(tiny_model))
    snakemake(work, {})
    run = json.loads((work / "results/tracking/run.json").read_text())
    assert run["status"] == "ok" and run["tracking_uri"] == "sqlite:///results/mlflow.db", run
    return work


def sqlite_client(work: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{work}/results/mlflow.db")


GRIDS = {"iter_000": {"rollout_grid.png": "iter_000/grid.png", "eval_grid.png": "iter_000/eval_grid.png"},
         "iter_001": {"rollout_grid.png": "iter_001/grid.png", "eval_grid.png": "iter_001/eval_grid.png"}}


@pytest.mark.workflow
def test_a_moved_run_folder_reruns_nothing_and_mlflow_ui_shows_every_image(sqlite_run, tmp_path):
    """The run folder (results/ and .snakemake/) copied elsewhere while the original is out of reach:
    `snakemake -n` there has nothing to do, no file under results/ (logs aside) names the old folder,
    and `mlflow ui` started in the copy, as the README says, lists and serves every grid, byte for byte."""
    moved = tmp_path / "archive" / "run"
    shutil.copytree(sqlite_run, moved, symlinks=True)  # copy2: mtimes kept, as mv, rsync -a, cp -a do
    away = sqlite_run.with_name(sqlite_run.name + "-away")
    sqlite_run.rename(away)  # the original path no longer exists while the copy is used
    try:
        dry = snakemake(moved, {}, "-n")
        assert planned_jobs(dry) == {} and "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]
        old = str(sqlite_run).encode()
        for path in sorted((moved / "results").rglob("*")):
            rel = path.relative_to(moved / "results")
            if path.is_file() and rel.parts[0] != "logs":
                assert old not in path.read_bytes(), rel
        ui = ("ui", "--backend-store-uri", "sqlite:///results/mlflow.db", "--artifacts-destination", "results/mlartifacts")
        with mlflow_process(*ui, cwd=moved, log_path=tmp_path / "ui.log") as ready:
            from mlflow.tracking import MlflowClient

            url = ready()
            client = MlflowClient(tracking_uri=url)
            parent = json.loads((moved / "results/tracking/run.json").read_text())
            # what `make mlflow-ui` prints: this server's page, the run's experiment on its runs table
            (line,) = browse.ui_lines(moved / "results", url)
            address = line.rsplit(" ", 1)[1]
            assert address == f"{url}/#/experiments/{parent['experiment_id']}/runs?workflowType=machine_learning"
            with urllib.request.urlopen(address.split("#")[0], timeout=10) as page:
                assert page.status == 200 and b"<html" in page.read().lower()
            assert client.get_experiment(parent["experiment_id"]).name == "rewardloop"
            kids = children(client, parent)
            assert sorted(kids) == sorted(GRIDS)
            served = {(name, a.path): (moved / "results" / GRIDS[name][a.path]).read_bytes()
                      for name, child in kids.items() for a in client.list_artifacts(child.info.run_id)}
            assert sorted(served) == sorted((name, file) for name in GRIDS for file in GRIDS[name])
            for (name, file), expected in served.items():
                local = client.download_artifacts(kids[name].info.run_id, file, str(tmp_path / name))
                assert Path(local).read_bytes() == expected, (name, file)
            base = client.download_artifacts(parent["run_id"], "base/eval_grid.png", str(tmp_path / "base"))
            assert Path(base).read_bytes() == (moved / "results/base/eval_grid.png").read_bytes()
    finally:
        away.rename(sqlite_run)


@pytest.mark.workflow
def test_a_benchmark_of_a_tracked_run_lands_in_its_parent_run(sqlite_run, tmp_path, monkeypatch, capsys):
    """`rewardloop benchmark` on a tracked run: benchmark/<set>/<metric> (mean, ci95, n) in the parent run at
    step = the model's iteration (base -1), equal to the table's, and the table as benchmark/benchmarks.csv."""
    from rewardloop.reports import benchmark_table
    from rewardloop.cli.main import main

    work = tmp_path / "run"
    shutil.copytree(sqlite_run, work, symlinks=True)  # the module's run stays as it is
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join((ROOT / "resources/prompts/eval.txt").read_text().splitlines()[:2]) + "\n")
    monkeypatch.chdir(work)  # where the workflow ran: the default store is relative to it
    assert main(["benchmark", "results", "--benchmark", f"two={prompts}:text", "--metric", "color_match",
                 "--checkpoints", "base,last"]) == 0
    assert "benchmark values and benchmark/benchmarks.csv -> the run's MLflow parent run" in capsys.readouterr().out

    table, folders = benchmark_table.rows(work / "results")
    assert folders == ["base", "iter_001"]
    (row,) = table
    client = sqlite_client(work)
    parent = json.loads((work / "results/tracking/run.json").read_text())["run_id"]
    for suffix, statistic in (("", "mean"), ("/ci95", "ci95"), ("/n", "n")):
        history = sorted((m.step, m.value) for m in client.get_metric_history(parent, f"benchmark/two/color_match{suffix}"))
        assert [step for step, _ in history] == [-1, 1], statistic
        assert [value for _, value in history] == pytest.approx([row[f"base_{statistic}"], row[f"iter_001_{statistic}"]])
    # where a server of this store serves the parent run's artifacts from (mlflow ui --artifacts-destination)
    (csv_file,) = (work / "results/mlartifacts").glob(f"*/{parent}/artifacts/benchmark/benchmarks.csv")
    assert pd.read_csv(csv_file).iloc[0]["iter_001_mean"] == pytest.approx(row["iter_001_mean"])


@pytest.mark.workflow
def test_experiment_opens_in_the_training_view_and_runs_last_as_long_as_their_work(sqlite_run, repo_root):
    client = sqlite_client(sqlite_run)
    parent = json.loads((sqlite_run / "results/tracking/run.json").read_text())
    experiment = client.get_experiment(parent["experiment_id"])
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # not MLflow 3's GenAI pages
    assert experiment.artifact_location == "mlflow-artifacts:/rewardloop"
    run = client.get_run(parent["run_id"])
    head = subprocess.run(["git", "-C", str(repo_root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert run.data.tags["rewardloop.git_commit"].startswith(head.strip()) and "rewardloop.workdir" not in run.data.tags
    kids = children(client, parent)
    for name, child in kids.items():
        folder = sqlite_run / "results" / name
        train = benchmark_seconds(sqlite_run / f"results/benchmarks/{name}/train.tsv")
        assert child.info.end_time - child.info.start_time >= 1000 * train, name  # it spans its stages' jobs
        mtimes = [int(p.stat().st_mtime * 1000) for p in (folder / "metrics").glob("*.json")]
        assert int((folder / "metrics/train.json").stat().st_mtime * 1000) <= child.info.end_time <= max(mtimes)
    ends = [c.info.end_time for c in kids.values()]
    assert run.info.status == "FINISHED" and run.info.end_time >= max(ends)  # not the few ms of tracking_run
    # it starts with the workflow run (its lock), before the first iteration's first job (1 s: ms rounding
    # and the benchmark's own start)
    assert run.info.start_time == runlock.taken_ms(sqlite_run / "results")
    assert run.info.start_time <= min(c.info.start_time for c in kids.values()) + 1000


@pytest.mark.workflow
def test_each_value_is_logged_under_one_name(sqlite_run):
    """One reward (color_match, weight 1) is the combined reward: it is logged as `reward` only, while
    eval.rewards' extra reward has its own name; the learning rate is the `train/lr` curve only."""
    client = sqlite_client(sqlite_run)
    parent = json.loads((sqlite_run / "results/tracking/run.json").read_text())
    for run_id in [parent["run_id"], *(c.info.run_id for c in children(client, parent).values())]:
        names = set(client.get_run(run_id).data.metrics)
        assert not {n for n in names if "reward_color_match" in n} and "train/learning_rate" not in names, run_id
        assert {"rollout/reward/raw_mean", "eval/reward/mean", "eval/reward_jpeg_compressibility/mean",
                "eval/reward_jpeg_compressibility/q50", "train/lr"} <= names, run_id
    scores = pd.read_parquet(sqlite_run / "results/iter_000/scores.parquet")
    assert scores.reward_color_match.equals(scores.reward)  # what makes it a copy, in the table itself


# ---------------------------------------------------------------------------------- without a server


def test_default_tracking_uri_is_sqlite_in_results(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert tracking.tracking_uri() == "sqlite:///results/mlflow.db"
    config = {"tracking": {"experiment": "unit"}, "train": {"steps": 3, "loss": "dpo"},
              "model": {"path": "resources/models/tiny-sd15"}, "rewards": {"color_match": 1.0, "dropped": None}}
    started = int(time.mktime((2025, 6, 1, 14, 3, 30, 0, 0, -1)) * 1000)  # 14:03 local time
    marker = tracking.start_parent_run(config, "results/tracking/run.json", start_ms=started)
    assert marker["status"] == "ok", marker
    assert (tmp_path / "results/mlflow.db").is_file()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri="sqlite:///results/mlflow.db")
    run = client.get_run(marker["run_id"])
    assert run.data.params["train.steps"] == "3" and run.info.start_time == started
    # named after the run, not the folder it was made in (a moved folder would still say the old one)
    assert run.info.run_name == marker["run_name"] == "tiny-sd15 color_match dpo 2025-06-01 14:03"
    assert "iteration is a child run" in run.data.tags["mlflow.note.content"]
    experiment = client.get_experiment(marker["experiment_id"])
    assert experiment.artifact_location == "mlflow-artifacts:/unit"  # no absolute path: the folder can move
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////elsewhere.db")
    assert tracking.tracking_uri() == "sqlite:////elsewhere.db"


def test_flatten_cuts_values_to_mlflow_limits():
    flat = tracking.flatten({"a": {"b": 1, "c": [1, 2]}, "long": "x" * 7000, "none": None, "empty": {}})
    assert flat["a.b"] == "1" and flat["a.c"] == "[1, 2]" and flat["none"] == "null" and flat["empty"] == "{}"
    assert len(flat["long"]) == 6000


@pytest.mark.workflow
def test_unreachable_server_fails_softly(tmp_path, tiny_model, repo_root, monkeypatch):
    """The job succeeds, the marker says failed with the reason; nothing else is touched. A server that
    refuses the very first call fails fast, even with MLflow's HTTP retries on (the default 3 here)."""
    dead = f"http://127.0.0.1:{free_port()}"
    env = {"MLFLOW_TRACKING_URI": dead}
    write_overlay(tmp_path, overlay(tiny_model))
    result = snakemake(tmp_path, env, "results/tracking/run.json")
    run = json.loads((tmp_path / "results/tracking/run.json").read_text())
    assert run["status"] == "failed" and "127.0.0.1" in run["reason"] and run["retryable"] is False, run
    assert run["summary"] == "connection refused" and run["seconds"] < 8, run  # 3 retries with backoff: ~15 s
    assert "tracking FAILED" in (tmp_path / "results/logs/tracking/run.log").read_text()
    assert (f"rewardloop: MLflow tracking failed ({dead}: connection refused); see results/tracking/run.json"
            in result.stderr.splitlines())
    # an iteration whose parent run could not be made: marker skipped, at once, no exception
    monkeypatch.setenv("MLFLOW_TRACKING_URI", dead)
    metrics = tmp_path / "results/iter_000/metrics"
    metrics.mkdir(parents=True)
    (metrics / "score.json").write_text('{"rollout/reward/raw_mean": 1.0}')
    marker = tracking.track_iteration(tmp_path / "results/tracking/run.json", 0, {"score": str(metrics / "score.json")},
                                      {}, {}, {}, 4, tmp_path / "results/iter_000/tracking.json")
    assert marker["status"] == "skipped" and "forcerun tracking_run" in marker["reason"] and marker["seconds"] < 1
    assert json.loads((tmp_path / "results/iter_000/tracking.json").read_text())["status"] == "skipped"
    # a parent that exists in run.json but a server that is down (it answered before: retryable)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    (tmp_path / "run_ok.json").write_text(json.dumps({"status": "ok", "run_id": "abc", "experiment_id": "1",
                                                      "tracking_uri": dead}))
    marker = tracking.track_iteration(tmp_path / "run_ok.json", 0, {"score": str(metrics / "score.json")}, {}, {}, {},
                                      4, tmp_path / "marker.json")
    assert marker["status"] == "failed" and marker["reason"] and marker["retryable"] is True


UNWRITABLE = "sqlite:////proc/rewardloop-tracking.db"  # /proc takes no new file, not even from root


@pytest.mark.workflow
@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux /proc for an unwritable folder")
def test_unwritable_tracking_uri_fails_fast_and_says_so_once(tmp_path, tiny_model, repo_root):
    """A SQLite store that cannot be opened: MLflow alone retries for ~100 s and the console said
    nothing. Now: tracking_run fails in seconds, the later tracking jobs skip, the run exits 0 with
    every stage artifact, and the end of the run prints one line naming the URI and the marker."""
    write_overlay(tmp_path, overlay(tiny_model, iterations=1))
    result = snakemake(tmp_path, {"MLFLOW_TRACKING_URI": UNWRITABLE})  # raises unless exit 0
    results = tmp_path / "results"
    for rel in ("base/eval.parquet", "base/eval_grid.png", "iter_000/samples.parquet", "iter_000/scores.parquet",
                "iter_000/eval.parquet", "iter_000/grid.png", "iter_000/metrics/train.json",
                "iter_000/metrics/export.json", "report/curves.png"):
        assert (results / rel).stat().st_size > 0, rel
    run = json.loads((results / "tracking/run.json").read_text())
    assert run["status"] == "failed" and run["retryable"] is False and run["tracking_uri"] == UNWRITABLE, run
    assert run["summary"] == "unable to open database file"
    for rel in ("base/tracking.json", "iter_000/tracking.json"):
        marker = json.loads((results / rel).read_text())
        assert marker["status"] == "skipped" and "results/tracking/run.json" in marker["reason"], (rel, marker)
    line = (f"rewardloop: MLflow tracking failed ({UNWRITABLE}: unable to open database file); "
            "see results/tracking/run.json")
    console = (result.stdout + result.stderr).splitlines()
    assert console.count(line) == 1 and sum("MLflow tracking failed" in c for c in console) == 1, result.stderr[-3000:]
    inside = {rel: json.loads((results / rel).read_text())["seconds"]
              for rel in ("tracking/run.json", "base/tracking.json", "iter_000/tracking.json")}
    jobs = {rel: benchmark_seconds(results / "benchmarks" / rel)
            for rel in ("tracking/run.tsv", "base/tracking.tsv", "iter_000/tracking.tsv")}
    print("seconds in tracking:", inside, "tracking jobs (benchmarks):", jobs)
    assert sum(inside.values()) < 20, inside  # before: ~105 s in tracking_run alone (MLflow's engine retries)
    # the whole job, with its start (the first job of a run also waits for the warm worker to boot)
    assert jobs["tracking/run.tsv"] < 60, jobs
    # a run that fails (onerror) says it too, and keeps its exit status
    (results / "iter_000/samples.parquet").write_bytes(b"PAR1 not a parquet file " * 10)  # newer: score reruns
    failed = subprocess.run([SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile",
                             str(tmp_path / "test.yaml"), "--cores", "1", "results/iter_000/scores.parquet"],
                            capture_output=True, text=True,
                            env={**os.environ, **QUIET_ENV, "MLFLOW_TRACKING_URI": UNWRITABLE})
    assert failed.returncode != 0 and (failed.stdout + failed.stderr).splitlines().count(line) == 1, failed.stderr[-3000:]


# ---------------------------------------------------------------------------------- error classes


def test_errors_are_classified_retryable_or_not(tmp_path):
    import sqlite3

    from mlflow.exceptions import MlflowException, RestException

    locked = MlflowException("(sqlite3.OperationalError) database is locked")
    assert tracking.retryable(locked) and tracking.retryable(sqlite3.OperationalError("database is locked"))
    refused = MlflowException("API request to http://h/api failed with exception HTTPConnectionPool(host='h', "
                              "port=1): Max retries exceeded (Caused by NewConnectionError(...: [Errno 111] "
                              "Connection refused'))")
    assert not tracking.retryable(refused) and tracking.retryable(refused, answered=True)
    assert tracking.summary(refused) == "connection refused"
    busy = MlflowException("API request to http://h/api failed with exception HTTPConnectionPool(host='h', port=1): "
                           "Max retries exceeded (Caused by ResponseError('too many 503 error responses'))")
    assert tracking.retryable(busy)
    assert not tracking.retryable(RestException({"error_code": "UNAUTHENTICATED", "message": "no"}))
    assert not tracking.retryable(RestException({"error_code": "PERMISSION_DENIED", "message": "no"}))
    assert tracking.retryable(RestException({"error_code": "TEMPORARILY_UNAVAILABLE", "message": "later"}))
    assert not tracking.retryable(MlflowException("API request to endpoint /x failed with error code 401 != 200"))
    for fatal in (sqlite3.OperationalError("unable to open database file"),
                  sqlite3.OperationalError("attempt to write a readonly database"),
                  PermissionError(13, "Permission denied", "/x"), FileNotFoundError(2, "No such file", "/x/y"),
                  tracking.TrackingError("experiment 'e' is deleted")):
        assert not tracking.retryable(fatal), fatal
    assert tracking.summary(FileNotFoundError(2, "No such file or directory", "/proc/nope")) == \
        "No such file or directory: /proc/nope"
    assert tracking.summary(sqlite3.OperationalError("unable to open database file")) == "unable to open database file"
    # a directory is no database: refused at once, before MLflow's ~100 s of engine retries
    started = time.perf_counter()
    with pytest.raises(sqlite3.OperationalError, match="unable to open"):
        tracking.client(f"sqlite:///{tmp_path}")
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize("status, retried", [(401, False), (403, False), (503, True)])
def test_first_contact_with_a_server_that_answers_an_error(tmp_path, monkeypatch, status, retried):
    """401/403 at the first call: no retries, failed in seconds; a 503 goes on to MLflow's retries."""
    import http.server
    import threading

    calls = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            calls.append(self.path)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    try:
        marker = tracking.start_parent_run({"tracking": {"experiment": "e"}}, tmp_path / "run.json")
    finally:
        server.shutdown()
        server.server_close()
    assert marker["status"] == "failed" and marker["retryable"] is retried, marker
    assert len(calls) == (1 + 1 + 2 if retried else 1), calls  # the probe, then the call with its 2 retries
    assert marker["seconds"] < 10


def test_locked_database_is_still_retried(tmp_path, monkeypatch):
    """Another writer holds the SQLite file for 3 s: tracking_run waits and retries, and succeeds."""
    import sqlite3
    import threading

    monkeypatch.chdir(tmp_path)
    db = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    tracking.client(f"sqlite:///{db}")  # the schema, so that the lock below is the only obstacle
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(3.0, lambda: holder.execute("ROLLBACK"))
    release.start()
    before = tracking.retry_stats["retries"]
    try:
        marker = tracking.start_parent_run({"tracking": {"experiment": "locked"}}, tmp_path / "run.json")
    finally:
        release.join()
        holder.close()
    assert marker["status"] == "ok", marker
    assert tracking.retry_stats["retries"] > before and marker["seconds"] >= 2.5


def test_failure_line_names_the_uri_the_cause_and_the_marker(tmp_path):
    results = tmp_path / "results"
    assert tracking.failure_line(results) is None
    (results / "iter_000").mkdir(parents=True)
    (results / "iter_000/tracking.json").write_text(json.dumps({"status": "ok"}))
    assert tracking.failure_line(results) is None
    (results / "iter_001").mkdir()
    (results / "iter_001/tracking.json").write_text(json.dumps(
        {"status": "failed", "tracking_uri": "http://h:5000", "reason": "MlflowException: boom\nmore"}))
    assert tracking.failure_line(results) == (
        f"rewardloop: MLflow tracking failed (http://h:5000: MlflowException: boom); see {results}/iter_001/tracking.json")
    (results / "tracking").mkdir()
    (results / "tracking/run.json").write_text(json.dumps(
        {"status": "failed", "tracking_uri": "sqlite:///x.db", "summary": "unable to open database file"}))
    (results / "base").mkdir()
    (results / "base/tracking.json").write_text("{not json")  # half a file: ignored, no exception
    line = tracking.failure_line(results)
    assert line == (f"rewardloop: MLflow tracking failed (sqlite:///x.db: unable to open database file); "
                    f"see {results}/tracking/run.json (and 1 more marker)")
    (results / "tracking/run.json").write_text(json.dumps(
        {"status": "failed", "tracking_uri": "http://user:secret@h:5000", "summary": "error code 401"}))
    line = tracking.failure_line(results)
    assert "(http://***@h:5000: error code 401)" in line and "secret" not in line
    import io

    out = io.StringIO()
    assert tracking.report(results, file=out) == line and out.getvalue() == line + "\n"


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


def test_the_training_curves_step_by_the_optimizer_steps_the_train_stage_took(tmp_path):
    """GRPO, NFT and AWM plan their optimizer steps from the data, not from train.steps: iteration 1 of
    a run whose train stage took 6 steps (train.steps 4) logs its curves at global steps 6 to 11, as
    the rule asks (steps_per_iteration None); DPO's 4 steps of 4 still join at 4 to 7."""
    def train_json(steps: int) -> dict:
        history = [{"step": i, "train/loss": 0.5 - 0.01 * i, "lr": 1e-4, "time": 0.25} for i in range(steps)]
        path = tmp_path / f"train_{steps}.json"
        path.write_text(json.dumps({"iteration": 1, "steps": steps, "history": history, "resumed_from_step": 0}))
        return {"train": str(path)}

    points, curve = tracking.iteration_points(1, train_json(6), {}, {}, None)
    assert sorted(p[3] for p in curve if p[0] == "train/loss") == list(range(6, 12))
    assert ("train/steps", 6.0) in [(p[0], p[1]) for p in points] and {p[3] for p in points} == {1}
    _, curve = tracking.iteration_points(1, train_json(4), {}, {}, None)
    assert sorted(p[3] for p in curve if p[0] == "train/loss") == [4, 5, 6, 7]


# ---------------------------------------------------------------------------------- the package itself


JOB_ENVIRONMENT = textwrap.dedent("""
    import json, os, sys
    before = dict(os.environ)
    from rewardloop import tracking
    changed_by_import = {k: v for k, v in os.environ.items() if before.get(k) != v}
    tracking.client("sqlite:///" + sys.argv[1])
    from mlflow.telemetry.client import get_telemetry_client
    print(json.dumps({"changed_by_import": changed_by_import, "telemetry": get_telemetry_client() is not None,
                      "after_client": {k: os.environ.get(k) for k in tracking.store.JOB_DEFAULTS}}))
""")


def test_importing_tracking_changes_no_environment_and_a_job_gets_its_mlflow_defaults(tmp_path):
    """The package's import leaves os.environ alone; the first client sets MLflow's HTTP retries and
    timeout and turns telemetry off (before mlflow is imported), the user's own values winning."""
    ci_markers = ("PYTEST_CURRENT_TEST", "CI", "GITHUB_ACTIONS", "DO_NOT_TRACK")  # each alone turns telemetry off
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k not in ci_markers}
    env.update(HF_HUB_OFFLINE="1", MLFLOW_HTTP_REQUEST_TIMEOUT="7")
    out = subprocess.run([sys.executable, "-c", JOB_ENVIRONMENT, str(tmp_path / "mlflow.db")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["changed_by_import"] == {}
    assert seen["after_client"] == {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_TIMEOUT": "7",
                                    "MLFLOW_DISABLE_TELEMETRY": "true"}
    assert seen["telemetry"] is False


def test_marking_writes_the_marker_ok_skipped_or_failed_and_never_raises(tmp_path, capsys):
    path = tmp_path / "marker.json"
    with tracking.marking({"status": "ok", "iteration": 2}, path) as job:
        job.marker["metrics"] = ["a"]
    written = json.loads(path.read_text())
    assert written["status"] == "ok" and written["metrics"] == ["a"] and 0 <= written["seconds"] < 5
    with tracking.marking({"status": "ok"}, path):
        raise tracking.Skipped("no parent run (results/tracking/run.json: boom)")
    written = json.loads(path.read_text())
    assert written["status"] == "skipped" and written["reason"].startswith("no parent run") and "retryable" not in written
    refused = ConnectionRefusedError(111, "Connection refused")
    for answered, retried in ((False, False), (True, True)):  # a refusal after the store answered may pass
        with tracking.marking({"status": "ok"}, path, answered=False) as job:
            job.answered = answered
            raise RuntimeError("API request failed: connection refused") from refused
        written = json.loads(path.read_text())
        assert written["status"] == "failed" and written["retryable"] is retried, written
        assert written["reason"] == "RuntimeError: API request failed: connection refused"
        assert written["summary"] == "API request failed: connection refused"
    err = capsys.readouterr().err
    assert "tracking skipped: no parent run" in err and err.count("tracking FAILED") == 2 and "Traceback" in err


def test_the_parent_run_is_named_after_its_recipe_and_start_not_its_folder():
    config = {"model": {"path": "stabilityai/stable-diffusion-3.5-medium"}, "train": {"loss": "grpo"},
              "rewards": {"ocr": {"weight": 1.0}, "pickscore": 0.5}, "tracking": {"run_name": None}}
    started = int(time.mktime((2025, 1, 9, 8, 5, 0, 0, 0, -1)) * 1000)
    assert tracking.parent_run_name(config, started) == "stable-diffusion-3.5-medium ocr+pickscore grpo 2025-01-09 08:05"
    fanout = {**config, "_experiment": {"name": "nft", "seed": 1}}  # one run of an experiments fan-out
    assert tracking.parent_run_name(fanout, started).endswith("2025-01-09 08:05 nft seed 1")
    named = {**config, "tracking": {"run_name": "mine"}}
    assert tracking.parent_run_name(named, started) == "mine"


def test_mlflow_ui_address_opens_each_tracked_experiment_on_its_runs_table(tmp_path):
    results = tmp_path / "results"
    assert browse.ui_lines(results) == [
        "MLflow: http://127.0.0.1:5000/ (no run tracked into sqlite:///results/mlflow.db under "
        f"{results}/ yet; add ?workflowType=machine_learning to an experiment's address for its runs table)"]
    (results / "tracking").mkdir(parents=True)
    (results / "tracking/run.json").write_text(json.dumps(
        {"status": "ok", "tracking_uri": "sqlite:///results/mlflow.db", "experiment": "rewardloop",
         "experiment_id": "3", "run_id": "r"}))
    fanout = results / "grpo/seed_0"  # a fan-out's run: found by its iteration folders
    (fanout / "iter_000").mkdir(parents=True)
    (fanout / "iter_000/eval.parquet").write_bytes(b"")
    (fanout / "tracking").mkdir()
    (fanout / "tracking/run.json").write_text(json.dumps(
        {"status": "ok", "tracking_uri": "http://h:5000", "experiment": "fan", "experiment_id": "9"}))
    assert browse.ui_lines(results, "http://127.0.0.1:5001") == [
        "MLflow: experiment 'rewardloop', runs table: "
        "http://127.0.0.1:5001/#/experiments/3/runs?workflowType=machine_learning",
        "MLflow: experiment 'fan' is on the server http://h:5000: "
        "http://h:5000/#/experiments/9/runs?workflowType=machine_learning"]
    (fanout / "tracking/run.json").write_text(json.dumps({"status": "failed", "tracking_uri": "http://h:5000"}))
    assert len(browse.ui_lines(results)) == 1


def test_the_pinned_mlflow_ui_honours_the_address_it_is_given():
    """What browse.runs_table_url relies on, read from the frontend the installed MLflow serves: the
    view follows a `workflowType` query parameter (genai or machine_learning, else the browser's stored
    choice, GenAI by default) and not the experimentKind tag, and `/experiments/:id/:tabName` with the
    tab `runs` is a route. An MLflow upgrade that changes either fails here."""
    import mlflow.server

    bundle = Path(mlflow.server.__file__).parent / "js/build/static/js"
    main = "".join(p.read_text(errors="replace") for p in bundle.glob("main.*.js"))
    assert 'e.get("workflowType")' in main and 'MACHINE_LEARNING="machine_learning"' in main
    assert 'key:"mlflow.workflowType",version:1,initialValue:c' in main and "const c=l.GENAI" in main
    assert '"/experiments/:experimentId/:tabName"' in main and 'Runs="runs"' in main
    assert browse.WORKFLOW_QUERY == "workflowType=machine_learning"


def test_make_mlflow_ui_prints_the_runs_table_address_before_the_server_starts():
    plan = subprocess.run(["make", "-n", "-C", str(ROOT), "mlflow-ui", "MLFLOW_PORT=5123"],
                          capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()  # (the venv's commands first, when it is out of date)
    commands = lines[next(i for i, line in enumerate(lines) if "rewardloop.tracking.browse" in line):]
    assert "--url http://127.0.0.1:5123" in commands[0], commands
    assert commands[1].endswith("mlflow ui --backend-store-uri sqlite:///results/mlflow.db "
                                "--artifacts-destination results/mlartifacts --port 5123"), commands

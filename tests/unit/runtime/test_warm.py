"""Warm start (src/rewardloop/runtime/warm.py): a real worker process, real job processes that delegate to it.

The workflow-level check (a warm run and a cold run give bit-identical LoRAs and eval) is in
test_crash_resume.py; the kill harness there also kills warm jobs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rewardloop.runtime import warm

# A job script as the Snakemake script directive would run it: job() first, the stage inside.
PROBE = textwrap.dedent("""
    import json, os, pathlib, sys, tempfile, time
    preloaded = "torch" in sys.modules  # only a fork of the warm worker has torch before any import
    mlflow = "mlflow" in sys.modules  # and mlflow where the run tracks
    from types import SimpleNamespace
    from rewardloop.runtime.snakemake_job import job

    snakemake = SimpleNamespace(log=[], rule="probe", resources=SimpleNamespace(gpu=0))
    with job(snakemake):
        import torch
        if sys.argv[1] == "sleep":
            pathlib.Path(sys.argv[2]).write_text(str(os.getpid()))
            time.sleep(120)
        print(json.dumps({"preloaded": preloaded, "mlflow": mlflow, "pid": os.getpid(), "cwd": os.getcwd(), "argv": sys.argv[1:],
                          "tmp": tempfile.gettempdir(), "threads": torch.get_num_threads(),
                          "in_worker_env": os.environ.get("REWARDLOOP_WARM_SOCKET")}))
    sys.exit(int(sys.argv[1]) if sys.argv[1].isdigit() else 0)
""")


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    folder = tmp_path_factory.mktemp("warm")
    started = warm.start(folder / "worker.log")
    assert started is not None, (folder / "worker.log").read_text()
    # The worker's environment: a job's must equal it (pytest changes PYTEST_CURRENT_TEST per test)
    yield dict(os.environ)
    warm.stop(started)
    assert not started.folder.exists()


@pytest.fixture
def probe(tmp_path) -> Path:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    return script


def run_probe(probe: Path, *args: str, env: dict | None = None, cwd: Path | None = None):
    process = subprocess.Popen([sys.executable, str(probe), *args], cwd=cwd or probe.parent, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = process.communicate(timeout=120)
    return process, out, err


def test_a_job_runs_in_a_fork_with_its_own_cwd_args_streams_temp_folder_threads_and_exit_code(
        worker, probe, tmp_path):
    job_tmp = tmp_path / "job-tmp"
    job_tmp.mkdir()
    env = dict(worker, OMP_NUM_THREADS="1", TMPDIR=str(job_tmp))  # what Snakemake sets per job
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    process, out, err = run_probe(probe, "7", env=env, cwd=elsewhere)
    assert process.returncode == 7, err
    seen = json.loads(out.splitlines()[-1])
    assert seen["preloaded"] is True and seen["mlflow"] is True, err  # warm.start's default: the run tracks
    assert seen["pid"] != process.pid  # the fork ran it; the job process only waited
    assert seen["cwd"] == str(elsewhere)
    assert seen["argv"] == ["7"]
    assert seen["tmp"] == str(job_tmp)
    assert seen["threads"] == 1
    assert seen["in_worker_env"] is None  # what the job starts does not come back to the worker
    assert "running in a fork" in out and "not used" not in err


def test_a_failing_job_reports_its_error_on_the_job_processs_stderr(worker, tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(textwrap.dedent("""
        from types import SimpleNamespace
        from rewardloop.runtime.snakemake_job import job
        with job(SimpleNamespace(log=[], rule="fails", resources=SimpleNamespace(gpu=0))):
            raise ValueError("generate.steps: expected >= 1")
    """))
    result = subprocess.run([sys.executable, str(script)], env=worker, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    assert "rule fails failed: ValueError: generate.steps: expected >= 1" in result.stderr


def test_killing_the_job_process_kills_its_fork_at_once(worker, probe, tmp_path):
    pid_file = tmp_path / "fork.pid"
    process = subprocess.Popen([sys.executable, str(probe), "sleep", str(pid_file)], cwd=tmp_path, env=worker,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    fork = int(pid_file.read_text())
    assert fork != process.pid
    process.send_signal(signal.SIGKILL)
    process.wait()
    time.sleep(0.5)
    assert not alive(fork), f"the fork {fork} outlived its killed job"


def test_a_job_whose_environment_differs_runs_in_its_own_process_and_only_the_name_is_shown(
        worker, probe):
    env = dict(worker, REWARDLOOP_PROBE_SECRET="hunter2-value")
    process, out, err = run_probe(probe, "0", env=env)
    assert process.returncode == 0, err
    seen = json.loads(out.splitlines()[-1])
    assert seen["pid"] == process.pid and seen["preloaded"] is False
    assert "warm worker not used" in err and "REWARDLOOP_PROBE_SECRET" in err
    assert "hunter2-value" not in err


def test_a_refusal_sent_before_the_job_process_runs_its_next_line_is_read(monkeypatch):
    """On a loaded machine the worker can read the whole request, refuse it and close the connection
    before the job process goes on after its send: the job must still read the reason (an empty
    send on the closed socket made it a "Broken pipe" once, in a CI rehearsal). The worker's own request handler
    answers on the other end of a socket pair, right after the job's send."""
    job_side, worker_side = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    job_side.settimeout(30)
    real_send_fds = socket.send_fds

    def send_and_let_the_worker_answer_and_close(sock, buffers, fds):
        sent = real_send_fds(sock, buffers, fds)
        warm._answer(worker_side, None, {**os.environ, "ONLY_IN_THE_WORKER": "1"}, {})
        worker_side.close()
        return sent

    monkeypatch.setattr(socket, "send_fds", send_and_let_the_worker_answer_and_close)
    reason = "environment differs from the worker.s in ONLY_IN_THE_WORKER$"
    with job_side, pytest.raises(warm._Refused, match=reason):
        warm._run_remotely(job_side)


def test_a_worker_for_a_run_without_tracking_leaves_mlflow_to_the_jobs(probe, tmp_path):
    starter = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(f"""
            import subprocess, sys
            from rewardloop.runtime import warm
            worker = warm.start({str(tmp_path / "worker.log")!r}, tracking=False)
            done = subprocess.run([sys.executable, {str(probe)!r}, "0"], capture_output=True, text=True)
            warm.stop(worker)
            print(done.stdout, done.stderr)
        """)], capture_output=True, text=True, timeout=300)
    seen = json.loads(next(line for line in starter.stdout.splitlines() if line.startswith("{")))
    assert seen["preloaded"] is True and seen["mlflow"] is False, starter.stdout + starter.stderr


def test_without_a_reachable_worker_the_job_runs_in_its_own_process(probe, tmp_path):
    env = dict(os.environ, REWARDLOOP_WARM_SOCKET=str(tmp_path / "gone.sock"))
    process, out, err = run_probe(probe, "0", env=env)
    assert process.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["pid"] == process.pid
    assert "warm worker not reachable" in err


def test_the_worker_exits_when_the_process_that_started_it_is_killed(tmp_path):
    starter = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import time
            from rewardloop.runtime import warm
            worker = warm.start({str(tmp_path / "worker.log")!r})
            print(worker.process.pid, worker.folder, flush=True)
            time.sleep(300)
        """)], stdout=subprocess.PIPE, text=True)
    pid, folder = starter.stdout.readline().split()
    starter.kill()
    starter.wait()
    deadline = time.monotonic() + 120  # it notices within a second once its imports are done (slow on a loaded machine)
    while alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(int(pid))
    assert not Path(folder).exists()  # its socket folder went with it


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie is dead, only not yet reaped


def test_socket_folders_of_killed_runs_are_removed_and_a_live_runs_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(warm.tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid that has exited
    stale = tmp_path / f"{warm.FOLDER_PREFIX}{dead}-abc123"
    live = tmp_path / f"{warm.FOLDER_PREFIX}{os.getpid()}-def456"
    for folder in (stale, live):
        folder.mkdir()
        (folder / warm.SOCKET_NAME).touch()
    assert warm.remove_folders_of_dead_runs() == 1
    assert not stale.exists() and live.exists()

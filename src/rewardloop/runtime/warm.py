"""Warm start: run each local Snakemake job in a fork of one worker that imported the libraries once.

On 2 CPU cores a model job spends ~5 s importing torch, diffusers, transformers and peft before
its first step, more than the tiny model's stage work in some stages. When a local run starts
(Snakefile ``onstart``, config ``warm_start``), ``start`` launches ``python -m rewardloop.runtime.warm``:
it listens on a Unix socket in a private temp folder, imports those libraries, and then forks one
child per job request. A job script's ``snakemake_job.job()`` calls ``delegate()`` first: it sends
the job's own script (Snakemake's temp script with the pickled job), argv, cwd, environment and
stdin/stdout/stderr to the worker, and waits for the child's exit code, which it exits with.

What keeps this safe:
- The child runs exactly what the job process would have run, in the job's cwd, environment and
  standard streams; the worker only saves the imports. Nothing in the worker touches a tensor, so
  no thread pool exists when it forks.
- The worker refuses a job whose environment or Python differs from its own (libraries read some
  variables at import time); the job then runs in its own process, as without warm start.
- When the job process dies (Snakemake cancels it, a SIGKILL), its socket closes and the child
  kills itself at once: killing the job still kills the work.
- Only the same user can connect (SO_PEERCRED), and the socket sits in a 0700 folder.
- The worker exits when the Snakemake process that started it is gone.
Snakemake's benchmark files still time each job's wall clock; their CPU and memory columns now
describe only the job's waiting process.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

SOCKET_ENV = "REWARDLOOP_WARM_SOCKET"
SOCKET_NAME = "worker.sock"
FOLDER_PREFIX = "rewardloop-warm-"  # + the pid of the Snakemake process whose run it serves

# Imported once by the worker: what the model, score, train and tracking jobs import. Optional
# ones (a reward's extra) are skipped when missing; a job imports whatever else it needs itself.
PRELOAD = (
    "numpy", "pandas", "pyarrow.parquet", "PIL.Image", "tqdm", "yaml", "jsonschema",
    "torch", "safetensors.torch", "accelerate", "peft",
    "transformers:CLIPTextModel", "transformers:CLIPTextModelWithProjection", "transformers:CLIPTokenizer",
    "diffusers:UNet2DConditionModel", "diffusers:AutoencoderKL", "diffusers:DDIMScheduler",
    "diffusers:StableDiffusionPipeline",
    "snakemake.iocontainers", "snakemake.logging",
    "rewardloop.stages.generate", "rewardloop.stages.score", "rewardloop.stages.train",
    "rewardloop.stages.evaluate", "rewardloop.rewards",
)
# Imported too when the run tracks to MLflow (0.7 s of the ~7 s; without tracking no job imports them).
PRELOAD_TRACKING = ("mlflow", "rewardloop.tracking")

# Variables Snakemake sets per job (threads, its temp folder) or the shell sets: they may differ from
# the worker's, and the child takes the job's values (thread pools and tempfile re-read them).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
PER_JOB_VARIABLES = frozenset(THREAD_VARIABLES + ("TMPDIR", "TEMP", "TEMPDIR", "TMP", "PS1", "SHLVL", "_",
                                                  "PWD", "OLDPWD"))

_IN_WORKER = False  # True in a worker's child: its job() must run the job, not delegate it again
_started: WarmWorker | None = None  # the worker this (Snakemake) process launched
FIRST_REPLY_TIMEOUT_S = 300
_HEADER = struct.Struct("!I")
_MAX_REQUEST = 1 << 24


class _Refused(Exception):
    """The worker will not run this job (the reason is printed and the job runs in its own process)."""


# ---------------------------------------------------------------- the job side


def in_worker() -> bool:
    return _IN_WORKER


def delegate() -> None:
    """Run this job in the warm worker and exit with its exit code; return when there is none.

    Called at the start of every job script (snakemake_job.job). Returns, and the job runs in this
    process, when warm start is off, the worker is gone, or it refused the job (the reason goes to
    stderr)."""
    path = os.environ.get(SOCKET_ENV)
    if _IN_WORKER or not path:
        return
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
    except OSError as exc:
        print(f"rewardloop: warm worker not reachable ({exc.strerror or exc}); the job imports its own "
              "libraries", file=sys.stderr, flush=True)
        return
    with conn:
        try:
            code = _run_remotely(conn)
        except _Refused as exc:
            print(f"rewardloop: warm worker not used: {exc}; the job imports its own libraries",
                  file=sys.stderr, flush=True)
            return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run_remotely(conn: socket.socket) -> int:
    request = {
        "script": os.path.abspath(sys.argv[0]), "argv": sys.argv, "cwd": os.getcwd(),
        "env": dict(os.environ), "executable": sys.executable, "prefix": sys.prefix,
        "umask": _current_umask(),
    }
    payload = json.dumps(request).encode()
    message = _HEADER.pack(len(payload)) + payload
    replies = conn.makefile("r", encoding="utf-8")
    try:
        sent = socket.send_fds(conn, [message], [0, 1, 2])
        if sent < len(message):  # an empty send on a socket the worker has answered and closed is EPIPE
            conn.sendall(message[sent:])
        conn.settimeout(FIRST_REPLY_TIMEOUT_S)  # it waits while the worker still imports, at the run's start
        first = replies.readline()
    except TimeoutError:
        raise _Refused(f"no answer within {FIRST_REPLY_TIMEOUT_S} s") from None
    except OSError as exc:
        raise _Refused(f"the connection failed ({exc})") from None
    if first.startswith("refused "):
        raise _Refused(first[len("refused "):].strip())
    if not first.startswith("started "):
        raise _Refused("the worker closed the connection")
    conn.settimeout(None)  # from here on the fork runs the job: wait as long as it takes
    try:
        last = replies.readline()
    except OSError:
        last = ""
    if last.startswith("exit "):
        return int(last.split()[1])
    print(f"rewardloop: the warm worker's child for this job (pid {first.split()[1]}) died without an "
          "exit code (killed: out of memory, or a signal)", file=sys.stderr, flush=True)
    return 1


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------- the Snakefile side


class WarmWorker:
    """The worker process of one run, started by ``start`` and ended by ``stop``."""

    def __init__(self, process: subprocess.Popen, folder: Path):
        self.process, self.folder = process, folder


def start(log_path: str | os.PathLike, wait_s: float = 10.0, tracking: bool = True) -> WarmWorker | None:
    """Launch the worker for this (Snakemake) process and point its jobs at it (``SOCKET_ENV``);
    ``stop()`` ends it. ``tracking``: the run's jobs log to MLflow (the worker imports it too).

    Returns None, after saying why, when it cannot listen (jobs then import their own libraries),
    and on systems other than Linux (forking a process that imported torch is not safe on macOS)."""
    if sys.platform != "linux":
        print("rewardloop: warm start runs on Linux only; each job imports its own libraries")
        return None
    remove_folders_of_dead_runs()
    folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))  # 0700: only this user
    sock = folder / SOCKET_NAME
    os.environ[SOCKET_ENV] = str(sock)  # before the launch: the worker's environment equals the jobs'
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "rewardloop.runtime.warm", str(sock), str(os.getpid()),
                                    "tracking" if tracking else "no-tracking"],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   env=dict(os.environ))  # what Snakemake gives its jobs (not libc's copy)
    deadline = time.monotonic() + wait_s
    while not sock.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if not sock.exists():
        process.kill()
        process.wait()
        shutil.rmtree(folder, ignore_errors=True)
        del os.environ[SOCKET_ENV]
        print(f"rewardloop: warm worker did not start (see {log_path}); each job imports its own libraries")
        return None
    global _started
    _started = WarmWorker(process, folder)
    return _started


def remove_folders_of_dead_runs() -> int:
    """Delete the socket folders that runs killed with SIGKILL left in the temp folder (the folder
    names the Snakemake pid; a live run's stays). Returns how many."""
    removed = 0
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*-*"):
        pid = folder.name[len(FOLDER_PREFIX):].split("-")[0]
        try:
            mine = folder.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # PermissionError: alive, another user's
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def stop(worker: WarmWorker | None = None) -> None:
    """End ``worker``, by default the one ``start`` launched, if any (jobs it already forked run on:
    they belong to their job processes)."""
    global _started
    worker = worker or _started
    if worker is _started:
        _started = None
    if worker is None:
        return
    os.environ.pop(SOCKET_ENV, None)
    worker.process.terminate()
    try:
        worker.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait()
    shutil.rmtree(worker.folder, ignore_errors=True)


# ---------------------------------------------------------------- the worker


def preload(names=PRELOAD) -> list[str]:
    """Import ``names`` (``module`` or ``module:attribute`` for lazily loaded classes); the missing."""
    missing = []
    for name in names:
        module, _, attribute = name.partition(":")
        try:
            loaded = importlib.import_module(module)
            if attribute:
                getattr(loaded, attribute)
        except Exception:  # an optional extra that is not installed, or broken: the job will say
            missing.append(name)
    return missing


def serve(sock_path: str, parent_pid: int, tracking: bool = True) -> None:
    """Listen at once (jobs queue while the imports run), preload, then fork a child per request."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(64)
    environment = dict(os.environ)  # before the imports: mlflow and torch add variables of their own
    started = time.perf_counter()
    missing = preload(PRELOAD + (PRELOAD_TRACKING if tracking else ()))
    print(f"warm worker {os.getpid()}: imports took {time.perf_counter() - started:.1f} s"
          + (f"; not importable: {', '.join(missing)}" if missing else ""), file=sys.stderr, flush=True)
    added_by_imports = {k: v for k, v in os.environ.items() if k not in environment}
    try:
        while os.getppid() == parent_pid:  # Snakemake gone (even by SIGKILL): stop
            _reap_children()
            if not select.select([listener], [], [], 1.0)[0]:
                continue
            conn, _ = listener.accept()
            with conn:
                _answer(conn, listener, environment, added_by_imports)
    finally:
        listener.close()
        shutil.rmtree(Path(sock_path).parent, ignore_errors=True)


def _answer(conn: socket.socket, listener: socket.socket, environment: dict, added_by_imports: dict) -> None:
    try:
        request, fds = _read_request(conn)
    except (OSError, ValueError) as exc:
        print(f"warm worker: bad request ({exc})", file=sys.stderr, flush=True)
        return
    try:
        reason = _refusal(conn, request, environment)
        if reason:
            conn.sendall(f"refused {reason}\n".encode())
            return
        if os.fork() == 0:
            _run_child(conn, listener, request, fds, added_by_imports)  # never returns
    except OSError as exc:
        print(f"warm worker: {exc}", file=sys.stderr, flush=True)
    finally:
        for fd in fds:
            os.close(fd)


def _read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    conn.settimeout(10)
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    if len(data) < _HEADER.size or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ValueError("expected a header and 3 file descriptors")
    (size,) = _HEADER.unpack_from(data)
    if size > _MAX_REQUEST:
        raise ValueError(f"request of {size} bytes")
    body = data[_HEADER.size:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ValueError("truncated request")
        body += chunk
    conn.settimeout(None)
    return json.loads(body), fds


def _refusal(conn: socket.socket, request: dict, environment: dict) -> str | None:
    """Why this job must not run here, or None. Names of differing variables only: never values."""
    uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
    if uid != os.getuid():
        return f"the job runs as user {uid}, the worker as {os.getuid()}"
    if (request["executable"], request["prefix"]) != (sys.executable, sys.prefix):
        return f"the job's Python is {request['executable']}, the worker's {sys.executable}"
    changed = sorted(k for k in set(request["env"]) | set(environment)
                     if request["env"].get(k) != environment.get(k) and k not in PER_JOB_VARIABLES)
    if changed:
        return "the job's environment differs from the worker's in " + ", ".join(changed)
    return None


def _run_child(conn: socket.socket, listener: socket.socket, request: dict, fds: list[int],
               added_by_imports: dict) -> None:
    """In the forked child: become the job (streams, cwd, argv), run its script, report the exit code."""
    global _IN_WORKER
    _IN_WORKER = True
    code = 1
    try:
        listener.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        _take_environment(request["env"], added_by_imports)
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(request["script"])
        conn.sendall(f"started {os.getpid()}\n".encode())  # fails when the job process gave up waiting
        threading.Thread(target=_die_with_job, args=(conn,), daemon=True).start()
        code = _run_script(request["script"])
        sys.stdout.flush()
        sys.stderr.flush()
        conn.sendall(f"exit {code}\n".encode())
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _take_environment(env: dict, added_by_imports: dict) -> None:
    """The job's environment (plus what the preloaded imports set, as they would have in the job),
    and what the imports read from it at start-up: temp folder, threads."""
    os.environ.clear()
    os.environ.update({**added_by_imports, **env})
    os.environ.pop(SOCKET_ENV, None)  # processes the job starts run cold, never back into the worker
    tempfile.tempdir = None  # re-read TMPDIR
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:  # as a fresh process would: torch and BLAS pools
        import threadpoolctl
        import torch

        torch.set_num_threads(int(threads))
        threadpoolctl.threadpool_limits(int(threads))


def _die_with_job(conn: socket.socket) -> None:
    """The job process closes the socket only by exiting: then the job was cancelled or killed."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def _run_script(script: str) -> int:
    import runpy

    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return (exc.code or 0) & 0xFF
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def _reap_children() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


if __name__ == "__main__":
    # Serve from the importable module, not this __main__ copy: the children's job() must see their
    # _IN_WORKER flag in rewardloop.runtime.warm.
    from rewardloop.runtime import warm

    warm.serve(sys.argv[1], int(sys.argv[2]), tracking=sys.argv[3:] != ["no-tracking"])

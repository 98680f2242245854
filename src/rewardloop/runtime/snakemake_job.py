"""What every Snakemake script entry point does around its stage: log to the rule's log file,
honour the job's threads, silence the libraries' known noise (host/library_noise.py), and report
errors as one readable line at the end of the log."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback

from rewardloop.host import library_noise
from rewardloop.runtime import gpu_slots, warm


@contextlib.contextmanager
def job(snakemake, uses_gpu: bool = True):
    """``with job(snakemake): stage.run(...)`` with stdout/stderr in ``log[0]``.

    A local job that asks for GPUs (resource ``gpu``) sees only GPUs of its own (see gpu_slots).
    ``uses_gpu=False``: a job that never touches a GPU claims none, whatever its resources say (the
    gathers of sharded stages share their rule's name, and so a profile's GPU request, with the
    sharded stage).
    With warm start on, the job runs in a fork of the run's warm worker instead (see warm.py).
    """
    warm.delegate()  # exits with the job's exit code when the warm worker ran it
    library_noise.install()
    log_path = snakemake.log[0] if snakemake.log else None
    stream = open(log_path, "a", buffering=1) if log_path else None
    saved = sys.stdout, sys.stderr
    if stream:
        sys.stdout = sys.stderr = stream
    try:
        gpus = int(getattr(snakemake.resources, "gpu", 0) or 0) if uses_gpu else 0
        gpu_locks = gpu_slots.assign(gpus)
        if warm.in_worker():
            print(f"rewardloop: running in a fork (pid {os.getpid()}) of the warm worker", flush=True)
        if gpu_locks:
            print(f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}", flush=True)
        yield
    except BaseException as exc:
        traceback.print_exc()
        message = f"rule {snakemake.rule} failed: {type(exc).__name__}: {exc}"
        print(message, flush=True)
        sys.stdout, sys.stderr = saved
        print(message + (f" (log: {log_path})" if log_path else ""), file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    finally:
        sys.stdout, sys.stderr = saved
        if stream:
            stream.close()


def iteration(snakemake) -> int:
    return int(snakemake.wildcards.it)

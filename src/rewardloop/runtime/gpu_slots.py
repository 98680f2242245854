"""Give each local GPU job GPUs of its own: Snakemake counts ``gpu`` resources but assigns no devices.

A job that asks for N GPUs takes N free devices by holding an exclusive ``flock`` on one lock file per
device (in a machine-wide folder, so two workflows on one host do not collide either), and sets
``CUDA_VISIBLE_DEVICES`` to them before CUDA is initialised. While fewer than N are free it waits
(holding none, so two multi-GPU jobs cannot deadlock); a job asking for more GPUs than the machine
has fails at once. The kernel drops the locks when the job's process ends, however it ends. So no two
jobs ever share a GPU, without a global ``--resources gpu=N`` cap (which the workflow profile would
also impose on SLURM runs, where Snakemake reads profiles/default too).

Under SLURM the scheduler already sets ``CUDA_VISIBLE_DEVICES`` for the allocation, and nothing is done.
"""

from __future__ import annotations

import fcntl
import glob
import os
import re
import time
from pathlib import Path

LOCK_DIR = Path(os.environ.get("REWARDLOOP_GPU_LOCK_DIR", "/tmp/rewardloop-gpu-locks"))
WAIT_S = 7 * 24 * 3600.0  # a local job waits for its GPUs as long as the run lasts


class GpuSlotError(RuntimeError):
    pass


def visible_devices() -> list[str]:
    """Device ids this process may use: $CUDA_VISIBLE_DEVICES when set, else every /dev/nvidiaN."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    numbers = (re.fullmatch(r"/dev/nvidia(\d+)", path) for path in glob.glob("/dev/nvidia*"))
    return [m.group(1) for m in sorted(filter(None, numbers), key=lambda m: int(m.group(1)))]


def claim(count: int, devices: list[str] | None = None, lock_dir: Path | None = None,
          wait_s: float = 0.0, poll_s: float = 2.0) -> tuple[list[str], list]:
    """Lock ``count`` free devices of ``devices``, waiting up to ``wait_s`` seconds for them.

    Returns (their ids, the open lock files to keep open for as long as the devices are used).
    """
    devices = visible_devices() if devices is None else devices
    if count > len(devices):
        raise GpuSlotError(f"the job needs {count} GPU(s) but this machine has {len(devices)} ({devices})")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _try_claim(count, devices, Path(lock_dir or LOCK_DIR))
        except GpuSlotError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(poll_s)


def _try_claim(count: int, devices: list[str], lock_dir: Path) -> tuple[list[str], list]:
    lock_dir.mkdir(parents=True, exist_ok=True)
    taken, handles = [], []
    for device in devices:
        if len(taken) == count:
            break
        handle = open(lock_dir / f"gpu{device}.lock", "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        taken.append(device)
        handles.append(handle)
    if len(taken) < count:
        for handle in handles:
            handle.close()
        raise GpuSlotError(f"the job needs {count} GPU(s) but only {len(taken)} of {devices} are free "
                           f"(locks in {lock_dir})")
    return taken, handles


def assign(count: int) -> list:
    """Outside SLURM, claim ``count`` GPUs and expose only them to this process (and its children).

    Returns the lock handles; keep them referenced for the job's lifetime.
    """
    if count <= 0 or "SLURM_JOB_ID" in os.environ:
        return []
    taken, handles = claim(count, wait_s=WAIT_S)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(taken)
    return handles

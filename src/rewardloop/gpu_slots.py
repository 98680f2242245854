"""Give each local GPU job GPUs of its own: Snakemake counts ``gpu`` resources but assigns no devices.

A job that asks for N GPUs takes N free devices by holding an exclusive ``flock`` on one lock file per
device (in a machine-wide folder, so two workflows on one host do not collide either), and sets
``CUDA_VISIBLE_DEVICES`` to them before CUDA is initialised. The kernel drops the locks when the job's
process ends, however it ends. With ``--resources gpu=<number of GPUs>`` (profiles/default) Snakemake
never starts more GPU jobs than there are devices, so a job always finds its devices free; if it does
not (another program's jobs), it fails with a message instead of sharing a GPU by accident.

Under SLURM the scheduler already sets ``CUDA_VISIBLE_DEVICES`` for the allocation, and nothing is done.
"""

from __future__ import annotations

import fcntl
import glob
import os
import re
from pathlib import Path

LOCK_DIR = Path(os.environ.get("REWARDLOOP_GPU_LOCK_DIR", "/tmp/rewardloop-gpu-locks"))


class GpuSlotError(RuntimeError):
    pass


def visible_devices() -> list[str]:
    """Device ids this process may use: $CUDA_VISIBLE_DEVICES when set, else every /dev/nvidiaN."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    numbers = (re.fullmatch(r"/dev/nvidia(\d+)", path) for path in glob.glob("/dev/nvidia*"))
    return [m.group(1) for m in sorted(filter(None, numbers), key=lambda m: int(m.group(1)))]


def claim(count: int, devices: list[str] | None = None, lock_dir: Path | None = None) -> tuple[list[str], list]:
    """Lock ``count`` free devices of ``devices``; return (their ids, the open lock files to keep open)."""
    devices = visible_devices() if devices is None else devices
    lock_dir = Path(lock_dir or LOCK_DIR)
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
        raise GpuSlotError(
            f"the job needs {count} GPU(s) but only {len(taken)} of {devices} are free (locks in {lock_dir}); "
            f"run with --resources gpu=<number of GPUs> so Snakemake never starts more GPU jobs than there are GPUs"
        )
    return taken, handles


def assign(count: int) -> list:
    """Outside SLURM, claim ``count`` GPUs and expose only them to this process (and its children).

    Returns the lock handles; keep them referenced for the job's lifetime.
    """
    if count <= 0 or "SLURM_JOB_ID" in os.environ:
        return []
    taken, handles = claim(count)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(taken)
    return handles

"""Run the train stage in several processes with `accelerate launch` (DDP over the job's GPUs).

One process trains inside the calling process, as before. P > 1 processes are started by
``accelerate launch --num_processes P`` (torchrun underneath) on ``rewardloop.stages.train``, which
reads its arguments from a JSON file: on GPUs one process per GPU with NCCL; on the CPU the same
launcher gives gloo (the Accelerator is created with cpu=True there), which is what the tests use.
FSDP is not offered: the in-stage checkpoint and the LoRA are written from rank 0's parameters,
which FSDP would shard (see docs/running-on-slurm.md).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Mapping

ARGS_FILE = "launch.json"


def free_port() -> int:
    """A free TCP port for the rendezvous, so concurrent train jobs on one host do not collide."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_flags(processes: int, mixed_precision: str) -> list[str]:
    """DDP through torchrun's launcher (`--multi_gpu`); on a host without GPUs the ranks use gloo."""
    return ["--multi_gpu", "--num_processes", str(processes), "--num_machines", "1",
            "--main_process_port", str(free_port()), "--mixed_precision", mixed_precision, "--dynamo_backend", "no"]


def run_launched(kwargs: Mapping, processes: int, mixed_precision: str, workdir) -> None:
    """Run ``rewardloop.stages.train.run(**kwargs)`` in ``processes`` processes; raise if any fails."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    args_path = workdir / ARGS_FILE
    args_path.write_text(json.dumps(dict(kwargs), default=str))
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *launch_flags(processes, mixed_precision),
           "-m", "rewardloop.stages.train", str(args_path)]
    print("launching:", " ".join(cmd), flush=True)
    result = subprocess.run(cmd, stdout=_fd(sys.stdout), stderr=_fd(sys.stderr))
    if result.returncode != 0:
        raise RuntimeError(f"accelerate launch with {processes} processes failed (exit status {result.returncode})")


def _fd(stream):
    """The stream's file descriptor (the job's log file), or None to inherit ours."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None

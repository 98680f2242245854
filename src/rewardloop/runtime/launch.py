"""Run the train stage in several processes with `accelerate launch` (DDP over the job's GPUs).

One process trains inside the calling process, as before. P > 1 processes are started by
``accelerate launch --num_processes P`` (torchrun underneath) on ``rewardloop.stages.train``, which
reads its arguments from a JSON file: on GPUs one process per GPU with NCCL; on the CPU the same
launcher gives gloo (the Accelerator is created with cpu=True there), which is what the tests use.

A train job over several nodes (a SLURM allocation with ``nodes: N``, see docs/running-on-slurm.md) starts
one torchrun agent per node with ``srun``; the agents meet at a c10d rendezvous hosted by this node (the
batch step runs on the allocation's first node), which assigns node and process ranks, so no address or
node rank is set by hand. torchrun rather than ``accelerate launch`` there: accelerate wants each node's
``--machine_rank`` on its command line, which one srun command line cannot give per node; the
Accelerator reads the same RANK/WORLD_SIZE/LOCAL_RANK environment under either launcher.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

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
    args_path = write_args(kwargs, workdir)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *launch_flags(processes, mixed_precision),
           "-m", "rewardloop.stages.train", str(args_path)]
    _run(cmd, f"accelerate launch with {processes} processes")


def write_args(kwargs: Mapping, workdir) -> Path:
    """The JSON file every rank reads its ``rewardloop.stages.train.run`` arguments from."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    args_path = workdir / ARGS_FILE
    args_path.write_text(json.dumps(dict(kwargs), default=str))
    return args_path


def node_command(args_path, nodes: int, per_node: int, endpoint: str, run_id: str) -> list[str]:
    """What runs on each of ``nodes`` nodes: a torchrun agent starting ``per_node`` training processes,
    all meeting at the c10d rendezvous ``endpoint`` (host:port) under ``run_id``."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", str(per_node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
            "-m", "rewardloop.stages.train", str(args_path)]


def srun_prefix(nodes: int) -> list[str]:
    """One task per node of the job's allocation; one failing node ends them all (no hang)."""
    return ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]


def allocation_nodes(env: Mapping[str, str] = os.environ) -> int:
    """Nodes of the SLURM allocation this job runs in (1 outside SLURM)."""
    return int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 1)


def multinode_command(args_path, nodes: int, per_node: int, env: Mapping[str, str] = os.environ) -> list[str]:
    """The train job's command over ``nodes`` nodes of its SLURM allocation: srun, then a torchrun agent
    per node, the rendezvous on this node (the first of the allocation) at a free port."""
    in_allocation = allocation_nodes(env)
    if in_allocation != nodes:
        raise RuntimeError(f"the train job asks for {nodes} nodes (its `nodes` resource) but runs in an allocation of "
                           f"{in_allocation} (SLURM_JOB_NUM_NODES): run it through a SLURM profile whose set-resources "
                           "give train `nodes`, `tasks` (one per node) and `mpi: srun` (docs/running-on-slurm.md)")
    endpoint = f"{socket.gethostname()}:{free_port()}"
    run_id = f"rewardloop-train-{env.get('SLURM_JOB_ID', os.getpid())}"
    return [*srun_prefix(nodes), *node_command(args_path, nodes, per_node, endpoint, run_id)]


def node_environment(threads: int, env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The launch's environment (srun passes it to every node): each process's OpenMP threads set before it
    starts, as torchrun sets them for several processes per node but not for one, so that a process computes
    alike whatever the split (the thread count changes a CPU kernel's summation order)."""
    return {**env, "OMP_NUM_THREADS": str(threads)}


def run_on_nodes(kwargs: Mapping, nodes: int, per_node: int, workdir) -> None:
    """Run ``rewardloop.stages.train.run(**kwargs)`` in ``per_node`` processes on each of ``nodes`` nodes."""
    cmd = multinode_command(write_args(kwargs, workdir), nodes, per_node)
    _run(cmd, f"the train launch over {nodes} nodes x {per_node} processes", node_environment(kwargs["threads"]))


def _run(cmd: Sequence[str], what: str, env: Mapping[str, str] | None = None) -> None:
    print("launching:", " ".join(cmd), flush=True)
    result = subprocess.run(list(cmd), stdout=_fd(sys.stdout), stderr=_fd(sys.stderr), env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed (exit status {result.returncode})")


def _fd(stream):
    """The stream's file descriptor (the job's log file), or None to inherit ours."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None

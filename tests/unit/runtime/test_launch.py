"""The train launch over several nodes (runtime/launch.py): the command a 2-node SLURM allocation's train job
runs, read from the environment sbatch gives the job; and a job whose allocation does not match its request."""

from __future__ import annotations

import socket

import pytest

from rewardloop.runtime import launch

TWO_NODE_ALLOCATION = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[01-02]"}


def test_the_command_of_a_two_node_job_starts_a_torchrun_agent_per_node_meeting_on_this_node():
    cmd = launch.multinode_command("/shared/state/launch.json", nodes=2, per_node=8, env=TWO_NODE_ALLOCATION)
    srun, agent = cmd[:5], cmd[5:]
    assert srun == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    flags = dict(zip(agent[3:-3:2], agent[4:-3:2]))
    assert agent[1:3] == ["-m", "torch.distributed.run"] and agent[-3:] == ["-m", "rewardloop.stages.train",
                                                                          "/shared/state/launch.json"]
    assert flags["--nnodes"] == "2" and flags["--nproc-per-node"] == "8" and flags["--rdzv-backend"] == "c10d"
    host, port = flags["--rdzv-endpoint"].rsplit(":", 1)
    assert host == socket.gethostname() and 1024 <= int(port) < 65536  # the batch step's node: the first one
    assert flags["--rdzv-id"] == "rewardloop-train-4242"  # no two jobs' agents meet


def test_a_job_outside_an_allocation_of_its_node_count_is_refused_naming_the_resources():
    with pytest.raises(RuntimeError, match=r"asks for 2 nodes .* allocation of 1 .*`nodes`, `tasks` .* `mpi: srun`"):
        launch.multinode_command("launch.json", nodes=2, per_node=1, env={"SLURM_JOB_NUM_NODES": "1"})
    with pytest.raises(RuntimeError, match="allocation of 1"):
        launch.multinode_command("launch.json", nodes=2, per_node=1, env={})  # not under SLURM at all


def test_every_node_runs_its_processes_with_the_threads_the_job_gives_each():
    env = launch.node_environment(threads=3, env={"PATH": "/bin", "OMP_NUM_THREADS": "16"})
    assert env == {"PATH": "/bin", "OMP_NUM_THREADS": "3"}

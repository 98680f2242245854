"""Training in 2 processes (`accelerate launch`, DDP over gloo on the CPU) equals 1 process with the
same global batch, and resumes from its in-stage checkpoint, for every objective: dpo on the tiny SD1.5's
pairs; grpo, nft and awm on the tiny SD3's rollouts. Real launches, real peft/accelerate steps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from rewardloop.runtime import launch
from rewardloop.config import stage_config
from rewardloop.models.loading import LORA_WEIGHTS
from rewardloop.stages import train
from rewardloop.training.state import STATE_FILE

from training_inputs import pair_files, run_cfg  # noqa: F401  (fixtures: tiny model rollouts, pairs)

pytestmark = pytest.mark.workflow  # launches processes: slower than a unit test


def train_once(run_cfg, pair_files, out, processes, batch_size, steps=4, loss="dpo"):  # noqa: F811
    cfg = stage_config(run_cfg, "seed", "model", "train", "device")
    cfg["train"].update(steps=steps, checkpointing_steps=2, batch_size=batch_size, num_processes=processes, loss=loss)
    return train_files(cfg, pair_files / "pairs.parquet", pair_files / "latents.safetensors", out, processes)


def train_files(cfg, signal_path, latents_path, out, processes):
    """The train stage on these files, in one process or launched in ``processes``; (LoRA, metrics)."""
    kwargs = dict(cfg=cfg, iteration=0, signal_path=str(signal_path),
                  latents_path=str(latents_path), init_lora_dir=None,
                  out_dir=str(out / "train"), state_dir=str(out / "state"), metrics_path=str(out / "train.json"),
                  threads=1, progress=False)
    if processes == 1:
        train.run(**kwargs)
    else:
        launch.run_launched(kwargs, processes, "no", out / "state")
    return load_file(out / "train" / LORA_WEIGHTS), json.loads((out / "train.json").read_text())


def test_two_processes_equal_one_with_the_same_global_batch_and_resume(run_cfg, pair_files, tmp_path):  # noqa: F811
    single, single_metrics = train_once(run_cfg, pair_files, tmp_path / "one", 1, batch_size=8)
    double, double_metrics = train_once(run_cfg, pair_files, tmp_path / "two", 2, batch_size=4)
    assert double_metrics["processes"] == 2 and single_metrics["processes"] == 1
    assert len(double_metrics["history"]) == 4  # one history (rank 0's), not one per rank
    assert single.keys() == double.keys()
    assert max(single[k].abs().max().item() for k in single) > 1e-4  # training moved the LoRA
    # Equal up to float reduction order (gloo's all-reduce vs one batched backward). Adam's normalised
    # steps can turn that into ~lr on a weight whose gradient is ~0, so compare each tensor as a whole:
    # lora_B starts at zero, so its norm is the training update itself.
    for key in single:
        assert (double[key] - single[key]).norm() <= 1e-3 * single[key].norm(), key
    losses = [h["train/loss"] for h in single_metrics["history"]], [h["train/loss"] for h in double_metrics["history"]]
    assert losses[1] == pytest.approx(losses[0], rel=1e-3)  # step 0 exact, then float drift

    # The 2-process run left its step-2 state; a rerun of the same job resumes there and ends alike.
    (tmp_path / "two" / "train" / LORA_WEIGHTS).unlink()
    resumed, resumed_metrics = train_once(run_cfg, pair_files, tmp_path / "two", 2, batch_size=4)
    assert resumed_metrics["resumed_from_step"] == 2 and len(resumed_metrics["history"]) == 4
    for key in double:
        torch.testing.assert_close(resumed[key], double[key], rtol=1e-5, atol=1e-7)


def test_sft_in_two_processes_equals_one_with_the_same_global_batch(run_cfg, pair_files, tmp_path):  # noqa: F811
    """sft (the chosen images' denoising loss) splits the pairs of a micro-batch over ranks as dpo does."""
    single, _ = train_once(run_cfg, pair_files, tmp_path / "one", 1, batch_size=8, loss="sft")
    double, metrics = train_once(run_cfg, pair_files, tmp_path / "two", 2, batch_size=4, loss="sft")
    assert metrics["processes"] == 2 and single.keys() == double.keys()
    assert max(single[k].abs().max().item() for k in single) > 1e-4  # training moved the LoRA
    for key in single:  # as dpo's above: up to float reduction order, tensor by tensor
        assert (double[key] - single[key]).norm() <= 1e-3 * single[key].norm(), key


def rank_pid(args_path: Path, rank: int) -> int | None:
    """The pid of the training process of ``rank`` launched on ``args_path`` (torchrun sets RANK in its
    environment), or None."""
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
            if b"rewardloop.stages.train" in cmdline and str(args_path).encode() in cmdline:
                if f"RANK={rank}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                    return int(proc.name)
        except OSError:  # a process that ended meanwhile
            continue
    return None


def signal_rank_1_after_the_first_checkpoint(run_job, out: Path, signum: int) -> tuple[str, float]:
    """Start ``run_job`` (a 2-process launch writing its state under ``out``) in a thread, send ``signum`` to
    its rank 1 once the first in-stage checkpoint exists, and wait for the launch to fail: (its error, seconds
    from the signal to the failure). Rank 1 is killed at the end if it is still there (a stopped process)."""
    ended = {}

    def launch_job():
        try:
            run_job()
        except RuntimeError as failed:
            ended.update(error=str(failed), at=time.monotonic())

    job = threading.Thread(target=launch_job)
    job.start()
    while not (out / "state" / STATE_FILE).is_file() and job.is_alive():
        time.sleep(0.05)
    args = out / "state" / launch.ARGS_FILE
    victim = rank_pid(args, 1)
    assert victim is not None, "rank 1 was not found running after the first checkpoint"
    os.kill(victim, signum)
    signalled = time.monotonic()
    try:
        job.join(timeout=300)
    finally:
        if rank_pid(args, 1) is not None:  # never leave a stopped process behind
            os.kill(victim, signal.SIGKILL)
    assert not job.is_alive(), f"the job still runs 300 s after rank 1 got signal {signum}"
    assert "error" in ended, "the launch did not fail"
    assert rank_pid(args, 0) is None and rank_pid(args, 1) is None  # no rank left running
    assert not (out / "train" / LORA_WEIGHTS).exists()
    return ended["error"], ended["at"] - signalled


def test_a_killed_rank_ends_the_job_at_once_and_the_rerun_resumes_from_its_checkpoint(run_cfg, pair_files,  # noqa: F811
                                                                                       tmp_path):
    """kill -9 of rank 1 after the first in-stage checkpoint: the launch fails within seconds (torchrun's agent
    stops rank 0, which would otherwise wait in its next all-reduce), leaves no rank behind and no LoRA; the
    same job again resumes from the checkpoint and ends on the uninterrupted run's LoRA."""
    steps = 16  # long enough to be killed midway: the first checkpoint is at step 2
    reference, _ = train_once(run_cfg, pair_files, tmp_path / "whole", 2, batch_size=4, steps=steps)
    out = tmp_path / "killed"
    error, seconds = signal_rank_1_after_the_first_checkpoint(
        lambda: train_once(run_cfg, pair_files, out, 2, batch_size=4, steps=steps), out, signal.SIGKILL)
    assert "accelerate launch with 2 processes failed" in error
    assert seconds < 60, f"the job took {seconds:.0f} s to fail"

    resumed, metrics = train_once(run_cfg, pair_files, out, 2, batch_size=4, steps=steps)
    assert metrics["resumed_from_step"] >= 2 and len(metrics["history"]) == steps
    for key in reference:
        torch.testing.assert_close(resumed[key], reference[key], rtol=1e-5, atol=1e-7)


def test_a_frozen_rank_fails_the_launch_after_the_collective_timeout_and_the_rerun_resumes(run_cfg, pair_files,  # noqa: F811
                                                                                          tmp_path, capfd):
    """SIGSTOP of rank 1 after the first checkpoint (a hung GPU, a node that stops answering: the process lives
    but never reaches the next all-reduce): with train.collective_timeout_s rank 0's all-reduce raises after
    that many seconds and the launch fails naming the timeout, instead of waiting torch's 30 minutes."""
    steps, timeout_s = 16, 8
    cfg = stage_config(run_cfg, "seed", "model", "train", "device")
    cfg["train"].update(steps=steps, checkpointing_steps=2, batch_size=4, num_processes=2,
                        collective_timeout_s=timeout_s)
    out = tmp_path / "frozen"

    def run_job():
        return train_files(cfg, pair_files / "pairs.parquet", pair_files / "latents.safetensors", out, 2)

    error, seconds = signal_rank_1_after_the_first_checkpoint(run_job, out, signal.SIGSTOP)
    assert "accelerate launch with 2 processes failed" in error
    # rank 0 fails after the timeout; torchrun then gives the stopped rank its grace period before SIGKILL
    assert timeout_s <= seconds < timeout_s + 120, f"the job took {seconds:.0f} s to fail"
    assert "timed out" in capfd.readouterr().err.lower()  # rank 0's error names the timeout

    resumed, metrics = run_job()
    assert metrics["resumed_from_step"] >= 2 and len(metrics["history"]) == steps


def test_two_nodes_meeting_at_a_c10d_rendezvous_train_as_one_node_with_as_many_processes(run_cfg, pair_files,  # noqa: F811
                                                                                        tmp_path):
    """The command the train job runs on every node of a 2-node SLURM allocation (a torchrun agent per node,
    ranks assigned by the c10d rendezvous, no address or node rank set by hand), started here as two
    separate process groups on 127.0.0.1: the LoRA equals the one-node 2-process run's."""
    one_node, _ = train_once(run_cfg, pair_files, tmp_path / "one_node", 2, batch_size=4)

    cfg = stage_config(run_cfg, "seed", "model", "train", "device")
    cfg["train"].update(steps=4, checkpointing_steps=2, batch_size=4, num_processes=2)
    out = tmp_path / "two_nodes"
    kwargs = dict(cfg=cfg, iteration=0, signal_path=str(pair_files / "pairs.parquet"),
                  latents_path=str(pair_files / "latents.safetensors"), init_lora_dir=None,
                  out_dir=str(out / "train"), state_dir=str(out / "state"), metrics_path=str(out / "train.json"),
                  threads=1, progress=False)
    command = launch.node_command(launch.write_args(kwargs, out / "state"), nodes=2, per_node=1,
                                  endpoint=f"127.0.0.1:{launch.free_port()}", run_id="two-nodes-test")
    env = launch.node_environment(threads=1)
    agents = [subprocess.Popen(command, start_new_session=True, env=env) for _ in range(2)]  # one per "node"
    try:
        statuses = [agent.wait(timeout=300) for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
    assert statuses == [0, 0]
    metrics = json.loads((out / "train.json").read_text())
    assert metrics["processes"] == 2 and len(metrics["history"]) == 4
    two_nodes = load_file(out / "train" / LORA_WEIGHTS)
    assert two_nodes.keys() == one_node.keys()
    for key in one_node:  # the same ranks and reduction as one node: equal but for float order
        torch.testing.assert_close(two_nodes[key], one_node[key], rtol=1e-5, atol=1e-7)


# --- the advantage objectives ---------------------------------------------------------------------

ADVANTAGE_OBJECTIVES = {
    "grpo": {"grpo": {"kl_beta": 0.04, "clip_range": 0.2}},
    "nft": {"nft": {"timestep_fraction": 0.5, "kl_beta": 0.01}},
    "awm": {"awm": {"num_train_timesteps": 2, "kl_beta": 0.01}},
    # DGPO: a batch of whole groups split over the ranks, its group sums all-reduced (the reference's)
    "dgpo": {"dgpo": {"trunc_steps": 3, "num_train_timesteps": 2, "kl_beta": 0.01}},
    # MixGRPO-Flash: the sliding window's SDE steps (every sample's the same), DPM-Solver++ after them
    "mixgrpo": {"mixgrpo": {"clip_range": 0.2}, "sde": {"strategy": "mixgrpo_window", "window_range": None,
                                                       "ode_after_window": "dpmsolver++", "compress_ratio": 1.0}},
}


@pytest.fixture(scope="module", params=sorted(ADVANTAGE_OBJECTIVES))
def advantage_files(request, tiny_sd3_model, tmp_path_factory):
    """(the objective's config, its iteration-0 advantages.parquet and latents.safetensors) on the tiny SD3."""
    from training_inputs import grpo_config as _cfg

    from rewardloop.objectives import get_objective
    from rewardloop.stages import advantages, generate, score

    loss = request.param
    cfg = _cfg(tiny_sd3_model, loss=loss, batch_size=4, **ADVANTAGE_OBJECTIVES[loss])
    objective = get_objective(loss)
    folder = tmp_path_factory.mktemp(f"rollouts_{loss}")
    generate.run(cfg, 0, None, folder / "samples.parquet", folder / "latents.safetensors", folder / "g.json",
                 progress=False, record_sde=objective.records_steps)
    score.run(cfg, folder / "samples.parquet", folder / "scores.parquet", folder / "s.json", progress=False)
    advantages.run(cfg, folder / "scores.parquet", folder / "advantages.parquet", folder / "a.json",
                   keep_tied_groups=objective.keeps_tied_groups)
    return loss, cfg, folder


def test_each_advantage_objective_trains_in_two_processes_as_in_one_with_the_doubled_batch(advantage_files,
                                                                                         tmp_path):
    """P processes of batch b = 1 process of batch P b (the same samples, noise and timesteps; DDP's mean of
    gradients); the logged metrics are the means over ranks; a rerun resumes from the 2-process checkpoint."""
    loss, cfg, folder = advantage_files
    job = stage_config(cfg, "seed", "model", "train", "device", "advantages")

    def run(out, processes, batch_size):
        c = {**job, "train": {**job["train"], "batch_size": batch_size, "num_processes": processes,
                              "checkpointing_steps": 1}}
        return train_files(c, folder / "advantages.parquet", folder / "latents.safetensors", out, processes)

    single, single_metrics = run(tmp_path / "one", 1, batch_size=4)
    double, double_metrics = run(tmp_path / "two", 2, batch_size=2)
    assert double_metrics["processes"] == 2 and single_metrics["steps"] == double_metrics["steps"] >= 2
    assert max(single[k].abs().max().item() for k in single) > 1e-6  # training moved the LoRA
    # Equal up to float reduction order (gloo's all-reduce of two half-batch gradients vs one batched backward;
    # Adam normalises the steps), tensor by tensor as in the dpo test above.
    for key in single:
        assert (double[key] - single[key]).norm() <= 1e-3 * single[key].norm() + 1e-7, (loss, key)
    # The logs are the global batch's (the ranks' shares weighted): step 0 before any update is the same batch.
    first = single_metrics["history"][0], double_metrics["history"][0]
    for key in ("train/loss", "train/kl_loss"):
        assert first[1][key] == pytest.approx(first[0][key], rel=1e-4, abs=1e-7), (loss, key)
    if loss == "mixgrpo":  # the rollouts were Flash's: SDE in the window, DPM-Solver++ after it
        assert set(pd.read_parquet(folder / "samples.parquet", columns=["sampler"]).sampler) == {"flow_sde+dpmsolver++"}
    if loss == "grpo":
        assert first[1]["train/log_prob_mean_abs_diff"] == pytest.approx(
            first[0]["train/log_prob_mean_abs_diff"], rel=1e-3, abs=1e-7)

    # Killed after its step-1 checkpoint (here: the finished job's LoRA removed), the rerun resumes there.
    (tmp_path / "two" / "train" / LORA_WEIGHTS).unlink()
    resumed, resumed_metrics = run(tmp_path / "two", 2, batch_size=2)
    assert resumed_metrics["resumed_from_step"] >= 1
    for key in double:
        torch.testing.assert_close(resumed[key], double[key], rtol=1e-5, atol=1e-7)

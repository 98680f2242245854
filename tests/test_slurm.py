"""The workflow on a real SLURM cluster through `--profile profiles/slurm` (one iteration, tiny model).

Needs the one-node cluster that tests/slurm_ci.sh starts (it sets REWARDLOOP_SLURM=1 and
SLURM_CONF); skipped otherwise. The run's model jobs must each have been an sbatch job that SLURM
reports COMPLETED (rollout and scoring in 2 shard jobs each), the artifacts must be those of a local
run, and training runs in 2 processes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pyarrow.parquet as pq
import pytest

from workflow_helpers import ROOT, snakemake, tiny_overlay, write_overlay

pytestmark = [
    pytest.mark.workflow,
    pytest.mark.skipif(os.environ.get("REWARDLOOP_SLURM") != "1",
                       reason="needs the SLURM cluster of tests/slurm_ci.sh"),
]

# SLURM jobs of a one-iteration run with 2 rollout and 2 scoring shards; the gathers, pairs, export,
# grids and report run on the submitting host.
REMOTE_JOBS = ["eval", "eval_base", "generate_shard", "generate_shard", "score_shard", "score_shard", "train"]
# The test cluster has no GPUs and little memory: replace the profile's per-rule GPU requests.
TEST_RESOURCES = [f"{rule}:{key}" for rule in sorted(set(REMOTE_JOBS)) for key in ("gpu=0", "mem_mb=1500")]


def slurm_jobs(stderr: str) -> dict[str, tuple[str, str]]:
    """{SLURM job id: (state, comment)} of the jobs this run submitted, as squeue reports them."""
    ids = re.findall(r"has been submitted with SLURM jobid (\d+)", stderr)
    out = subprocess.run(["squeue", "--states=all", "-h", "-o", "%i|%T|%k", "-j", ",".join(ids)],
                         capture_output=True, text=True, check=True).stdout
    return {line.split("|")[0]: tuple(line.split("|")[1:]) for line in out.splitlines()}


def test_one_iteration_through_the_slurm_profile(tmp_path, tiny_model):
    write_overlay(tmp_path, tiny_overlay(
        tiny_model, iterations=1, tracking={"enabled": False},
        generate={"prompts_per_iteration": 4, "images_per_prompt": 2, "steps": 2, "batch_size": 4, "shards": 2},
        score={"batch_size": 4, "shards": 2},
        train={"steps": 2, "batch_size": 2, "num_processes": 2}, eval={"steps": 2},
        resources={"threads": 1, "mem_mb": 1500, "runtime": 10},
    ))
    result = snakemake(
        tmp_path, "--profile", str(ROOT / "profiles/slurm"),
        "--set-resources", *TEST_RESOURCES,
        # No accounting database on the test cluster: poll squeue (MinJobAge keeps finished jobs).
        "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "2",
        "--slurm-no-account", "--latency-wait", "5",
    )
    jobs = slurm_jobs(result.stderr)
    rules = sorted(re.match(r"rule_(\w+?)(_wildcards_.*)?$", comment).group(1) for _, comment in jobs.values())
    assert rules == REMOTE_JOBS, result.stderr[-3000:]
    assert {state for state, _ in jobs.values()} == {"COMPLETED"}, jobs

    results = tmp_path / "results"
    for name in ("samples.parquet", "scores.parquet", "pairs.parquet", "eval.parquet",
                 "train/pytorch_lora_weights.safetensors", "checkpoint/pytorch_lora_weights.safetensors"):
        assert (results / "iter_000" / name).is_file(), name
    samples = pq.read_table(results / "iter_000/samples.parquet").to_pandas()
    scores = pq.read_table(results / "iter_000/scores.parquet").to_pandas()
    assert len(samples) == 8 and set(scores.sample_id) == set(samples.sample_id)
    assert (results / "base/eval.parquet").is_file() and (results / "report/curves.png").is_file()
    # The train job ran `accelerate launch` with 2 processes inside its SLURM allocation.
    assert json.loads((results / "iter_000/metrics/train.json").read_text())["processes"] == 2

"""The workflow on a real SLURM cluster through `--profile profiles/slurm` (one iteration, tiny model).

Needs the one-node cluster that tests/slurm_ci.sh starts (it sets REWARDLOOP_SLURM=1 and
SLURM_CONF); skipped otherwise. That node declares 4 GPUs (a GRES without devices), 64 CPUs and
256 GB, so the profile's requests are submitted as they are, GPUs included. The run's model jobs must
each have been an sbatch job that SLURM reports COMPLETED (rollout and scoring in 2 shard jobs
each), with the CPUs, memory, time limit and GPUs that profiles/slurm/config.yaml asks for its rule;
training runs in 2 processes; and the artifacts must equal those of the same config run locally
(plain `snakemake --cores 2`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess

import pyarrow.parquet as pq
import pytest
import yaml
from safetensors.torch import load_file

from rewardloop.artifacts import read_provenance

from workflow_helpers import ROOT, snakemake, tiny_overlay, write_overlay

pytestmark = [
    pytest.mark.workflow,
    pytest.mark.skipif(os.environ.get("REWARDLOOP_SLURM") != "1",
                       reason="needs the SLURM cluster of tests/slurm_ci.sh"),
]

# SLURM jobs of a one-iteration run with 2 rollout and 2 scoring shards; the gathers, pairs, export,
# grids and report run on the submitting host.
REMOTE_JOBS = ["eval", "eval_base", "generate_shard", "generate_shard", "score_shard", "score_shard", "train"]
PROFILE = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
PARTITION = "ci"  # the test cluster's default partition: the profile names none

# Artifacts compared with the local run: tables (values and provenance), tensors, LoRA files (bytes).
TABLES = ["iter_000/samples.parquet", "iter_000/scores.parquet", "iter_000/pairs.parquet",
          "iter_000/eval.parquet", "base/eval.parquet"]
LORAS = ["iter_000/train/pytorch_lora_weights.safetensors", "iter_000/checkpoint/pytorch_lora_weights.safetensors"]


def overlay(tiny_model) -> dict:
    return tiny_overlay(
        tiny_model, iterations=1, tracking={"enabled": False},
        generate={"prompts_per_iteration": 4, "images_per_prompt": 2, "steps": 2, "batch_size": 4, "shards": 2},
        score={"batch_size": 4, "shards": 2},
        train={"steps": 2, "batch_size": 2, "num_processes": 2}, eval={"steps": 2},
        resources={"threads": 1, "mem_mb": 1500, "runtime": 10},
    )


def scontrol_jobs(stderr: str) -> dict[str, dict[str, str]]:
    """{SLURM job id: scontrol's key=value fields} of the jobs this run submitted (finished jobs stay
    visible for MinJobAge)."""
    jobs = {}
    for job_id in re.findall(r"has been submitted with SLURM jobid (\d+)", stderr):
        out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True,
                             check=True).stdout
        jobs[job_id] = dict(re.findall(r"(\S+?)=(\S*)", out))
    return jobs


def megabytes(value: str) -> int:
    """scontrol's memory ("64000M", "125G") in MB."""
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)([MGT])", value).groups()
    return round(float(number) * {"M": 1, "G": 1024, "T": 1024 ** 2}[unit])


def minutes(value: str) -> int:
    """scontrol's time limit ("[days-]hours:minutes:seconds") in minutes."""
    days, _, clock = value.rpartition("-")
    hours, mins, _ = map(int, clock.split(":"))
    return (int(days or 0) * 24 + hours) * 60 + mins


def requested(rule: str) -> dict:
    """What the profile asks for ``rule``: its set-resources over the default-resources."""
    return {**PROFILE["default-resources"], **PROFILE["set-resources"][rule]}


def allocation(fields: dict[str, str]) -> dict:
    """What SLURM gave the job, in the profile's terms."""
    tres = dict(item.split("=", 1) for item in fields["AllocTRES"].split(",") if "=" in item)
    return {"partition": fields["Partition"], "cpus": int(fields["NumCPUs"]),
            "mem_mb": megabytes(fields["MinMemoryNode"]), "runtime": minutes(fields["TimeLimit"]),
            "gpu": int(tres.get("gres/gpu", 0))}


def expected_allocation(rule: str) -> dict:
    res = requested(rule)
    gpu = res.get("gpu", 0)
    # The executor plugin asks --cpus-per-task, else --cpus-per-gpu with GPUs, else the rule's threads (1).
    cpus = res.get("cpus_per_task") or (gpu * res["cpus_per_gpu"] if gpu and "cpus_per_gpu" in res else 1)
    return {"partition": PARTITION, "cpus": cpus, "mem_mb": res["mem_mb"], "runtime": res["runtime"], "gpu": gpu}


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_one_iteration_through_the_slurm_profile_equals_a_local_run(tmp_path, tiny_model):
    cluster, local = tmp_path / "slurm", tmp_path / "local"
    for work in (cluster, local):
        work.mkdir()
        write_overlay(work, overlay(tiny_model))
    result = snakemake(
        cluster, "--profile", str(ROOT / "profiles/slurm"),
        # No accounting database on the test cluster: poll squeue (MinJobAge keeps finished jobs).
        "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "2",
        "--slurm-no-account", "--latency-wait", "5",
    )
    jobs = scontrol_jobs(result.stderr)
    rules = {job_id: re.match(r"rule_(\w+?)(_wildcards_.*)?$", fields["Comment"]).group(1)
             for job_id, fields in jobs.items()}
    assert sorted(rules.values()) == REMOTE_JOBS, result.stderr[-3000:]
    assert {fields["JobState"] for fields in jobs.values()} == {"COMPLETED"}, jobs
    # Each job got what the profile asks for its rule (not the config's 1 CPU, 1500 MB, 10 min, 0 GPU).
    for job_id, rule in rules.items():
        assert allocation(jobs[job_id]) == expected_allocation(rule), (rule, jobs[job_id])
    assert {rule: expected_allocation(rule)["gpu"] for rule in rules.values()} == {
        "generate_shard": 1, "score_shard": 0, "train": 4, "eval": 1, "eval_base": 1}
    # The train job ran `accelerate launch` with 2 processes inside its SLURM allocation.
    results = cluster / "results"
    assert json.loads((results / "iter_000/metrics/train.json").read_text())["processes"] == 2
    assert (results / "report/curves.png").is_file()

    # The same config run locally gives the same artifacts.
    snakemake(local)
    for rel in TABLES:
        a, b = pq.read_table(local / "results" / rel), pq.read_table(results / rel)
        assert a.num_rows > 0 and a.equals(b), rel  # every column: images, seeds, rewards, pairs
        assert read_provenance(local / "results" / rel) == read_provenance(results / rel), rel
    for rel in LORAS:
        assert sha256(local / "results" / rel) == sha256(results / rel), rel
    latents_a, latents_b = (load_file(d / "results/iter_000/latents.safetensors") for d in (local, cluster))
    assert latents_a.keys() == latents_b.keys() and all(latents_a[k].equal(latents_b[k]) for k in latents_a)
    samples = pq.read_table(results / "iter_000/samples.parquet")
    assert samples.num_rows == 8

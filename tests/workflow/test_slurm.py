"""The workflow on a real SLURM cluster through `--profile profiles/slurm` (one iteration, tiny model).

The cluster test needs the one-node cluster that tests/slurm_ci.sh starts (it sets REWARDLOOP_SLURM=1
and SLURM_CONF); skipped otherwise. That node declares 4 GPUs (a GRES on stand-in device files), 64
CPUs and 256 GB, so the profile's requests are submitted as they are, GPUs included. The run's model
jobs must each have been an sbatch job that SLURM reports COMPLETED (rollout and scoring in 2 shard
jobs each), with the partition, CPUs, memory, time limit and GPUs that profiles/slurm/config.yaml asks
for its rule; training runs in 2 processes; and the artifacts must equal those of the same config run
locally (plain `snakemake --cores 2`). The profile is used as it is: its GPU request for `generate`
also reaches the local gather of that name, which must run on the GPU-less submitting host. With
`resources.group: iteration` the iteration's stages are one SLURM job instead, with the same artifacts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from rewardloop.mappings import deep_merge
from workflow_helpers import ROOT, SNAKEMAKE, file_digests, snakemake, tiny_overlay, write_overlay

pytestmark = pytest.mark.workflow
needs_cluster = pytest.mark.skipif(os.environ.get("REWARDLOOP_SLURM") != "1",
                                   reason="needs the SLURM cluster of tests/slurm_ci.sh")

# SLURM jobs of a one-iteration run with 2 rollout and 2 scoring shards (eval writes the grids and health);
# the gathers, pairs, export, guard, report and tracking run on the submitting host.
REMOTE_JOBS = ["eval", "eval_base", "generate_shard", "generate_shard", "preflight", "score_shard", "score_shard",
               "train"]
PROFILE = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
PARTITION = "ci"  # the test cluster's default partition: the profile names none

# Compared with the local run: every file under results/ byte for byte (these among them), but what
# times the work: logs, benchmark files, the run lock (a pid) and the timing fields of metrics files.
ARTIFACTS = ["iter_000/samples.parquet", "iter_000/latents.safetensors", "iter_000/scores.parquet",
             "iter_000/pairs.parquet", "iter_000/train/pytorch_lora_weights.safetensors",
             "iter_000/checkpoint/pytorch_lora_weights.safetensors", "iter_000/eval.parquet", "base/eval.parquet"]
TIMINGS = ("logs/", "benchmarks/", ".rewardloop.lock")


def overlay(tiny_model) -> dict:
    return tiny_overlay(
        tiny_model, iterations=1, tracking={"enabled": False},
        generate={"prompts_per_iteration": 4, "images_per_prompt": 2, "steps": 2, "batch_size": 4, "shards": 2},
        score={"batch_size": 4, "shards": 2},
        train={"steps": 2, "batch_size": 2, "num_processes": 2}, eval={"steps": 2},
        resources={"threads": 1, "mem_mb": 1500, "runtime": 10},
    )


def scontrol_jobs(stderr: str) -> dict[str, dict[str, str]]:
    """{SLURM job id: `scontrol -d show job`'s key=value fields} of the jobs this run submitted
    (finished jobs stay visible for MinJobAge)."""
    jobs = {}
    for job_id in re.findall(r"has been submitted with SLURM jobid (\d+)", stderr):
        out = subprocess.run(["scontrol", "-d", "-o", "show", "job", job_id], capture_output=True, text=True,
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
    """What SLURM gave the job, in the profile's terms (JOB_GRES: the GPUs allocated, e.g. "gpu:4")."""
    gpus = re.fullmatch(r"gpu:(\d+)(\(.*\))?", fields.get("JOB_GRES", ""))
    return {"partition": fields["Partition"], "cpus": int(fields["NumCPUs"]),
            "mem_mb": megabytes(fields["MinMemoryNode"]), "runtime": minutes(fields["TimeLimit"]),
            "gpu": int(gpus.group(1)) if gpus else 0}


def expected_allocation(rule: str) -> dict:
    res = requested(rule)
    gpu = res.get("gpu", 0)
    # The executor plugin asks --cpus-per-task, else --cpus-per-gpu with GPUs, else the rule's threads (1).
    cpus = res.get("cpus_per_task") or (gpu * res["cpus_per_gpu"] if gpu and "cpus_per_gpu" in res else 1)
    return {"partition": PARTITION, "cpus": cpus, "mem_mb": res["mem_mb"], "runtime": res["runtime"], "gpu": gpu}


def without_timings(metrics: dict) -> dict:
    """A metrics file's content but its perf/* keys (durations, spans) and each training step's time."""
    kept = {key: value for key, value in metrics.items() if not key.startswith("perf/")}
    if "history" in kept:
        kept["history"] = [{k: v for k, v in step.items() if k != "time"} for step in kept["history"]]
    return kept


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, tiny_model) -> Path:
    """The cluster runs' config run locally (--cores 2): what they must equal."""
    work = tmp_path_factory.mktemp("local")
    write_overlay(work, overlay(tiny_model))
    snakemake(work)
    return work


def cluster_run(work: Path) -> subprocess.CompletedProcess:
    return snakemake(
        work, "--profile", str(ROOT / "profiles/slurm"),
        # No accounting database on the test cluster: poll squeue (MinJobAge keeps finished jobs).
        "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "2",
        "--slurm-no-account", "--latency-wait", "5",
    )


def assert_same_artifacts(local: Path, cluster: Path, config_change: dict | None = None) -> None:
    """The same bytes (tables with their provenance, tensors, LoRA files, figures) and the same metrics
    but for their timings; the report's copy of the config also the same but for ``config_change``."""
    if config_change:
        configs = [yaml.safe_load((d / "results/report/config.yaml").read_text()) for d in (local, cluster)]
        assert deep_merge(configs[0], config_change) == configs[1]
    skip = TIMINGS + (("report/config.yaml",) if config_change else ())
    here, there = (file_digests(d / "results", skip=skip, mtime=False) for d in (local, cluster))
    assert here.keys() == there.keys() and set(ARTIFACTS) <= here.keys()
    differ = sorted(rel for rel in here if here[rel] != there[rel])
    # only JSON that records timings may differ: metrics/, and the preflight's figures and verdict
    timing_json = [rel for rel in differ if re.search(r"(^|/)metrics(/|\.json$)|(^|/)preflight(_figures)?\.json$", rel)]
    assert differ == timing_json, sorted(set(differ) - set(timing_json))
    for rel in differ:
        a, b = (json.loads((d / "results" / rel).read_text()) for d in (local, cluster))
        assert without_timings(a) == without_timings(b), rel


@needs_cluster
def test_one_iteration_through_the_slurm_profile_equals_a_local_run(tmp_path, tiny_model, local_run):
    # The profile as it is: its GPU request for `generate` also reaches the local gather of that
    # name, which must run on this GPU-less submitting host (it claims no GPU).
    cluster = tmp_path / "slurm"
    cluster.mkdir()
    write_overlay(cluster, overlay(tiny_model))
    result = cluster_run(cluster)
    jobs = scontrol_jobs(result.stderr)
    rules = {job_id: re.match(r"rule_(\w+?)(_wildcards_.*)?$", fields["Comment"]).group(1)
             for job_id, fields in jobs.items()}
    assert sorted(rules.values()) == REMOTE_JOBS, result.stderr[-3000:]
    assert {fields["JobState"] for fields in jobs.values()} == {"COMPLETED"}, jobs
    # Each job got what the profile asks for its rule (not the config's 1 CPU, 1500 MB, 10 min, 0 GPU).
    for job_id, rule in rules.items():
        assert allocation(jobs[job_id]) == expected_allocation(rule), (rule, jobs[job_id])
    # (and the profile does ask for GPUs: the node's 4 are what makes that checkable)
    assert {rule: expected_allocation(rule)["gpu"] for rule in rules.values()} == {
        "generate_shard": 1, "score_shard": 0, "train": 4, "eval": 1, "eval_base": 1, "preflight": 1}
    # The train job ran `accelerate launch` with 2 processes inside its SLURM allocation.
    results = cluster / "results"
    assert json.loads((results / "iter_000/metrics/train.json").read_text())["processes"] == 2
    assert (results / "report/curves.png").is_file()
    assert_same_artifacts(local_run, cluster)
    assert pq.read_table(results / "iter_000/samples.parquet").num_rows == 8


@needs_cluster
def test_resources_group_iteration_runs_an_iteration_in_one_allocation_equal_to_a_local_run(tmp_path, tiny_model,
                                                                                         local_run):
    """resources.group: iteration: the iteration's stages (shards, gathers, preflight, pairs, train, export,
    eval) are one SLURM job, sized for its largest layer (train's 4 GPUs); only the base eval is another."""
    cluster = tmp_path / "grouped"
    cluster.mkdir()
    write_overlay(cluster, deep_merge(overlay(tiny_model), {"resources": {"group": "iteration"}}))
    result = cluster_run(cluster)
    jobs = scontrol_jobs(result.stderr)
    comments = sorted(fields["Comment"] for fields in jobs.values())
    assert len(comments) == 2 and comments[0] == "rule_eval_base", comments
    assert comments[1].startswith("rule_iteration_000_"), comments  # the group job: its group id, then its rules
    assert {fields["JobState"] for fields in jobs.values()} == {"COMPLETED"}, jobs
    group = next(fields for fields in jobs.values() if fields["Comment"].startswith("rule_iteration_000_"))
    assert allocation(group)["gpu"] == 4, group
    assert_same_artifacts(local_run, cluster, config_change={"resources": {"group": "iteration"}})


# --- a train job over several nodes: planned and refused by dry runs (no cluster needed) ---------------------

TWO_NODES = ["train:nodes=2", "train:gpu=16", "train:tasks=2", "train:mpi=srun"]


def dry_run_with_train_resources(work, *resources: str) -> subprocess.CompletedProcess:
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile", str(work / "test.yaml"),
           "-n", "--profile", str(ROOT / "profiles/slurm"), "--set-resources", *resources]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_a_two_node_train_request_is_planned_as_one_job_on_two_nodes_and_a_misplaced_one_is_refused(tmp_path,
                                                                                                   tiny_model):
    """set-resources train: nodes 2, gpu 16, tasks 2 (a launcher per node), mpi srun (the executor leaves the
    job's command unwrapped): the dry run plans one train job with those resources; a count that does not split
    over the nodes, a missing tasks or mpi, and a local run are refused naming the key, before any job."""
    write_overlay(tmp_path, tiny_overlay(tiny_model, iterations=1, tracking={"enabled": False}))
    planned = dry_run_with_train_resources(tmp_path, *TWO_NODES)
    assert planned.returncode == 0, planned.stderr[-3000:]
    train = [block for block in planned.stdout.split("\n\n") if "rule train:" in block]
    assert len(train) == 1
    assert all(f"{res.split(':')[1]}" in train[0] for res in TWO_NODES), train[0]

    refusals = {
        "train:gpu=15": "15 training processes (train.num_processes, else the job's gpu resource) do not split evenly "
                        "over 2 nodes",
        "train:tasks=1": "needs tasks: 2 (one launcher per node",
        "train:mpi=": "needs mpi: srun",
    }
    for change, message in refusals.items():
        resources = [res for res in TWO_NODES if not res.startswith(change.split("=")[0] + "=")]
        if not change.endswith("="):
            resources.append(change)
        refused = dry_run_with_train_resources(tmp_path, *resources)
        said = refused.stdout + refused.stderr  # Snakemake prints a Snakefile's error on stdout
        assert refused.returncode != 0 and "set-resources train: nodes: 2" in said, change
        assert message in said, (change, said[-2000:])

    local = subprocess.run([SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile",
                            str(tmp_path / "test.yaml"), "--cores", "1", "--set-resources", *TWO_NODES],
                           capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert local.returncode != 0 and "a local run has one node" in local.stdout + local.stderr, local.stderr[-2000:]
    assert not (tmp_path / "results" / "iter_000").exists() and not (tmp_path / "results" / "base").exists()

# Input functions and helpers shared by the rules. Iteration 0 is the only special case: it
# samples from and trains on the base model (plus model.init_lora when given).

from rewardloop.config import stage_config
from rewardloop.objectives import get_objective
from rewardloop.runtime import resources as job_gpus
from rewardloop.models.loading import LORA_WEIGHTS, checkpoint_file, trained_file


wildcard_constraints:
    it=r"\d{3}",
    shard=r"\d{2}",


RESULTS = "results"
# What a train job writes and what marks an exported model(it): the LoRA file, or (train.adapter
# none) the full UNet and a full diffusers folder's model_index.json.
TRAINED_FILE = trained_file(config["train"]["adapter"])
CHECKPOINT_FILE = checkpoint_file(config["train"]["adapter"])
OFFLINE_DIR = f"{RESULTS}/offline"


def iter_dir(it):
    return f"{RESULTS}/iter_{int(it):03d}"


def checkpoint_dir(it):
    return f"{iter_dir(it)}/checkpoint"


# The objective (src/rewardloop/objectives/) decides the DAG's shape: its training signal (preference
# pairs or group advantages), whether rollouts record their SDE/DDIM steps, whether they sample an
# old policy kept beside the LoRA, and which weight sets model(it) holds beside its LoRA.
OBJECTIVE = get_objective(config["train"]["loss"])
SIGNAL = OBJECTIVE.signal
RECORD_SDE = OBJECTIVE.records_steps
EXTRA_ADAPTERS = OBJECTIVE.extra_adapters
# The train job's config: the advantages' clip is part of NFT's loss.
TRAIN_SECTIONS = ("seed", "model", "train", "data", "device") + (("advantages",) if SIGNAL == "advantages" else ())

ITERATION_ARTIFACTS = (
    "samples.parquet",
    "scores.parquet",
    f"{SIGNAL}.parquet",
    f"train/{TRAINED_FILE}",
    f"checkpoint/{CHECKPOINT_FILE}",
    "eval.parquet",
)


STAGES = ("generate", "score", SIGNAL, "train", "export", "eval")
# The stages' other outputs: targets too, so that deleting one of them redoes its stage (Snakemake
# otherwise remakes a missing file only when a job that reads it has to run anyway).
ITERATION_RECORDS = ("latents.safetensors", *(f"metrics/{stage}.json" for stage in STAGES),
                     *(f"{folder}/{name}/{LORA_WEIGHTS}" for folder in ("train", "checkpoint") for name in EXTRA_ADAPTERS))
REPORT_DIR = f"{RESULTS}/report"
TRACKING_RUN = f"{RESULTS}/tracking/run.json"


def all_targets():
    """Every stage's artifact and record of every iteration: deleting any one of them redoes its stage
    (and what follows).

    Plus the report's figures and config, and (with tracking.enabled) the MLflow tracking markers.
    """
    targets = [f"{RESULTS}/base/eval.parquet", f"{RESULTS}/base/metrics/eval.json"]
    for it in range(config["iterations"]):
        targets += [f"{iter_dir(it)}/{name}" for name in ITERATION_ARTIFACTS + ITERATION_RECORDS]
    targets += [f"{REPORT_DIR}/curves.png", f"{REPORT_DIR}/config.yaml", f"{RESULTS}/base/eval_grid.png"]
    targets += [f"{iter_dir(it)}/{name}" for it in range(config["iterations"]) for name in ("grid.png", "eval_grid.png")]
    if config["tracking"]["enabled"]:
        targets += [TRACKING_RUN, f"{RESULTS}/base/tracking.json"]
        targets += [f"{iter_dir(it)}/tracking.json" for it in range(config["iterations"])]
    return targets


def base_model_input(wildcards):
    """The base model folder when a rule of this workflow builds it; a user's model is checked at startup."""
    return [config["model"]["path"]] if config["model"]["build_tiny"] else []


def previous_lora_dir(wildcards):
    """model(it-1)'s LoRA folder, or None when iteration 0 starts from the bare base model."""
    it = int(wildcards.it)
    return checkpoint_dir(it - 1) if it > 0 else config["model"]["init_lora"]


def previous_lora_input(wildcards):
    """model(it-1)'s marker file: its checkpoint (LoRA or full model), or model.init_lora's LoRA."""
    it = int(wildcards.it)
    if it > 0:
        return [f"{checkpoint_dir(it - 1)}/{CHECKPOINT_FILE}"]
    folder = config["model"]["init_lora"]
    return [f"{folder}/{LORA_WEIGHTS}"] if folder else []


def rollout_lora_dir(wildcards):
    """The adapter rollouts sample: model(it-1)'s, or the objective's old policy kept beside it (NFT)."""
    folder = previous_lora_dir(wildcards)
    if OBJECTIVE.rollout_adapter == "current" or int(wildcards.it) == 0:
        return folder
    return f"{folder}/{OBJECTIVE.rollout_adapter}"


def rollout_lora_input(wildcards):
    if OBJECTIVE.rollout_adapter == "current" or int(wildcards.it) == 0:
        return previous_lora_input(wildcards)
    return [f"{rollout_lora_dir(wildcards)}/{LORA_WEIGHTS}"]


def previous_extra_adapters_input(wildcards):
    """model(it-1)'s weight sets beside its LoRA (NFT's old policy), which training continues."""
    it = int(wildcards.it)
    return list(extra_adapter_files(checkpoint_dir(it - 1)).values()) if it > 0 else []


def extra_adapter_files(folder):
    """{name: LoRA file} of the weight sets the objective keeps beside the LoRA in ``folder``."""
    return {name: f"{folder}/{name}/{LORA_WEIGHTS}" for name in EXTRA_ADAPTERS}


def export_config():
    """export's config: model, export, and only which adapter was trained (and the weight sets beside it)."""
    train = {"adapter": config["train"]["adapter"]}
    if EXTRA_ADAPTERS:
        train["extra_adapters"] = list(EXTRA_ADAPTERS)
    return {**stage_config(config, "model", "export"), "train": train}


def offline_pairs_input(wildcards):
    """The encoded offline pairs (data.offline_pairs), when configured."""
    if not config["data"]["offline_pairs"]:
        return []
    return [f"{OFFLINE_DIR}/pairs.parquet", f"{OFFLINE_DIR}/latents.safetensors"]


def offline_pairs_file(wildcards):
    return f"{OFFLINE_DIR}/pairs.parquet" if config["data"]["offline_pairs"] else None


def offline_latents_file(wildcards):
    return f"{OFFLINE_DIR}/latents.safetensors" if config["data"]["offline_pairs"] else None


def job_resources(extra_mem_mb=0, gpu=None):
    """mem_mb, runtime and gpu of a job; gpu defaults to a model job's (see src/rewardloop/runtime/resources.py)."""
    return {
        "mem_mb": config["resources"]["mem_mb"] + extra_mem_mb,
        "runtime": config["resources"]["runtime"],
        "gpu": job_gpus.model_gpus(config) if gpu is None else gpu,
    }


def train_signal_input(wildcards):
    """What train learns from: pairs.parquet or advantages.parquet, by train.loss."""
    return f"{iter_dir(wildcards.it)}/{SIGNAL}.parquet"


def train_dir(wildcards):
    return f"{iter_dir(wildcards.it)}/train"


def train_state_dir(wildcards):
    return f"{train_dir(wildcards)}/state"


def checkpoint_dir_of(wildcards):
    return checkpoint_dir(wildcards.it)


def iteration_of(wildcards):
    return int(wildcards.it)


def iteration_metrics(wildcards):
    """metrics/<stage>.json of every stage of the iteration (what track_iteration logs)."""
    return [f"{iter_dir(wildcards.it)}/metrics/{stage}.json" for stage in STAGES]


def iteration_benchmarks(wildcards):
    """{stage: benchmark TSV} of the iteration; read when present, not inputs (Snakemake writes them)."""
    return {stage: f"{RESULTS}/benchmarks/iter_{wildcards.it}/{stage}.tsv" for stage in STAGES}


def base_benchmark(wildcards):
    return f"{RESULTS}/benchmarks/base/eval.tsv"


def iteration_label(wildcards):
    return f"iteration {int(wildcards.it)}"


def all_iterations_metrics(stage):
    """An input function: metrics/<stage>.json of every configured iteration, in order."""

    def inputs(wildcards):
        return [f"{iter_dir(it)}/metrics/{stage}.json" for it in range(config["iterations"])]

    return inputs


def shard_outputs(stage, name):
    """An input function: ``name`` of every shard of ``stage`` (generate.shards / score.shards), in order."""

    def inputs(wildcards):
        return [f"{iter_dir(wildcards.it)}/shards/{stage}_{k:02d}/{name}" for k in range(config[stage]["shards"])]

    return inputs


def shard_index(wildcards):
    return int(wildcards.shard)

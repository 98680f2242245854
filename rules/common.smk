# The workflow's wiring shared by the rules: the run's paths, the DAG's shape from the objective, and the
# input functions of the jobs' wildcards. Iteration 0 is the only special case: it samples from and trains
# on the base model (plus model.init_lora when given). What is plain Python of the config (what a job reads,
# its resources, how a stage shards) lives in the package, tested there: src/rewardloop/runtime/.

import inspect
from pathlib import Path
from types import SimpleNamespace

from rewardloop import results_layout as layout
from rewardloop.runtime.job_config import eval_config, export_config, rescore_config, stage_config
from rewardloop.experiments import RUN_KEY as FANOUT_RUN_KEY
from rewardloop.objectives import get_objective
from rewardloop.runtime import resources as job_gpus
from rewardloop.runtime.resources import LIGHT_JOB, TABLE_JOB, gather_resources, job_resources
from rewardloop.runtime.sharding import StageSharding
from rewardloop.models.loading import LORA_WEIGHTS, checkpoint_file, trained_file


wildcard_constraints:
    it=layout.ITERATION_REGEX,
    shard=r"\d{2}",


# A run of an experiments fan-out (rules/experiments.smk) writes under results/<experiment>/seed_<s>/
# and takes the base model's eval from the fan-out's shared results/base/; a single run writes results/.
FANOUT_RUN = config.get(FANOUT_RUN_KEY) or {}
RUN = layout.RunLayout(FANOUT_RUN.get("dir", "results"))  # every path of the run folder (src/rewardloop/results_layout.py)
RESULTS = RUN.root
SHARED_RESULTS = FANOUT_RUN.get("shared")  # the fan-out's results/, which holds base/ and the model build's log
SHARED_RUN = layout.RunLayout(SHARED_RESULTS) if SHARED_RESULTS else None
# The folders as patterns of the {it} wildcard (a plain string is cheaper to plan than a function).
ITER_NAME = layout.iteration_name("{it}")
ITER = RUN.iteration("{it}")
BASE_DIR = RUN.base
# What a train job writes and what marks an exported model(it): the LoRA file, or (train.adapter
# none) the full UNet and a full diffusers folder's model_index.json.
TRAINED_FILE = trained_file(config["train"]["adapter"])
CHECKPOINT_FILE = checkpoint_file(config["train"]["adapter"])
OFFLINE_DIR = RUN.offline_dir
EVAL_CFG = eval_config(config)  # what an eval job reads: the same for the base model and every iteration
# eval.also_at_guidance: each scale's eval, and {name: what its eval jobs read} (for rule eval_at_guidance).
GUIDANCE_EVALS = layout.guidance_evals(config["eval"].get("also_at_guidance"))
GUIDANCE_EVAL_CFG = {evaluation.name: eval_config(config, evaluation.scale) for evaluation in GUIDANCE_EVALS}
GUIDANCE_EVAL_FILES = [evaluation.table for evaluation in GUIDANCE_EVALS] + [
    evaluation.metrics for evaluation in GUIDANCE_EVALS]


wildcard_constraints:
    guidance_eval=layout.guidance_wildcard_regex(GUIDANCE_EVALS),


def iter_dir(it):
    return RUN.iteration(it)


def checkpoint_dir(it):
    return f"{iter_dir(it)}/{layout.CHECKPOINT_DIR}"


# The training path's heavy jobs (rollouts, training) start first when several jobs are ready: they are
# the run's critical path, and the evals and reports fill the other cores beside them.
LOOP_PRIORITY = 1


def metrics_file(stage, folder=ITER):
    """metrics/<stage>.json of a folder (by default the {it} pattern's iteration folder)."""
    return f"{folder}/{layout.metrics_name(stage)}"


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
    layout.SAMPLES,
    layout.SCORES,
    layout.signal_table(SIGNAL),
    f"{layout.TRAIN_DIR}/{TRAINED_FILE}",
    f"{layout.CHECKPOINT_DIR}/{CHECKPOINT_FILE}",
    layout.EVAL_TABLE,
)


STAGES = layout.iteration_stages(SIGNAL)
# The stages' other outputs: targets too, so that deleting one of them redoes its stage (Snakemake
# otherwise remakes a missing file only when a job that reads it has to run anyway).
ITERATION_RECORDS = (layout.LATENTS, *(layout.metrics_name(stage) for stage in STAGES),
                     *(f"{folder}/{name}/{LORA_WEIGHTS}" for folder in (layout.TRAIN_DIR, layout.CHECKPOINT_DIR)
                       for name in EXTRA_ADAPTERS))
REPORT_DIR = RUN.report_dir
# What `rewardloop benchmark` left (run after the workflow, not one of its jobs): the report's table reads them.
BENCHMARK_TABLES = sorted(str(p) for p in Path(RESULTS).glob(f"*/{layout.BENCHMARK_DIR}/*.parquet")
                          if layout.parse_folder_name(p.parent.parent.name) is not None)
TRACKING_RUN = RUN.tracking_run


def stage_results():
    """The base model's eval and every iteration's artifacts and records: what the run's config made."""
    base_files = (layout.EVAL_TABLE, layout.metrics_name(layout.EVAL_STAGE), *GUIDANCE_EVAL_FILES)
    results = [f"{BASE_DIR}/{name}" for name in base_files]
    for it in range(config["iterations"]):
        results += [f"{iter_dir(it)}/{name}" for name in ITERATION_ARTIFACTS + ITERATION_RECORDS]
        results += [f"{iter_dir(it)}/{name}" for name in GUIDANCE_EVAL_FILES]
    return results


def all_targets():
    """Every stage's artifact and record of every iteration: deleting any one of them redoes its stage
    (and what follows).

    Plus the report's figures and config, (with tracking.enabled) the MLflow tracking markers, and the
    monitors' files (health, gold rescores, guard verdicts).
    """
    targets = stage_results()
    targets += [RUN.report(layout.CURVES), RUN.report(layout.RUN_CONFIG), f"{BASE_DIR}/{layout.EVAL_GRID}"]
    if BENCHMARK_TABLES:  # rule benchmark_table (rules/report.smk)
        targets.append(RUN.report(layout.BENCHMARK_REPORT))
    targets += [f"{iter_dir(it)}/{name}" for it in range(config["iterations"]) for name in (layout.GRID, layout.EVAL_GRID)]
    if config["tracking"]["enabled"]:
        targets += [TRACKING_RUN, f"{BASE_DIR}/{layout.TRACKING_MARKER}"]
        targets += [f"{iter_dir(it)}/{layout.TRACKING_MARKER}" for it in range(config["iterations"])]
    return targets + monitor_targets()  # rules/monitors.smk


# What a rule's input or params read of its job. Planning calls these functions once per job (1000
# iterations: some 30,000 calls), so a value that needs no arithmetic on the wildcards is a plain string
# with wildcards, which Snakemake formats itself, or a constant; and every function below goes through
# job_function(): Snakemake reads a function's signature at each call (inspect.signature, three times per
# job and function), unless the function carries it (the attribute snakemake.common.get_function_params
# reads first). Either way the jobs' inputs and params are the same values (see docs/performance.md).


def job_function(function):
    """``function``, carrying its own signature for Snakemake (read once here, not at every job)."""
    function._overwrite_params = inspect.signature(function).parameters
    return function


# The base model folder when a rule of this workflow builds it; a user's model is checked at startup.
BASE_MODEL_INPUT = [config["model"]["path"]] if config["model"]["build_tiny"] else []


@job_function
def previous_lora_dir(wildcards):
    """model(it-1)'s LoRA folder, or None when iteration 0 starts from the bare base model."""
    it = int(wildcards.it)
    return checkpoint_dir(it - 1) if it > 0 else config["model"]["init_lora"]


@job_function
def previous_lora_input(wildcards):
    """model(it-1)'s marker file: its checkpoint (LoRA or full model), or model.init_lora's LoRA."""
    it = int(wildcards.it)
    if it > 0:
        return [f"{checkpoint_dir(it - 1)}/{CHECKPOINT_FILE}"]
    folder = config["model"]["init_lora"]
    return [f"{folder}/{LORA_WEIGHTS}"] if folder else []


@job_function
def rollout_lora_dir(wildcards):
    """The adapter rollouts sample: model(it-1)'s, or the objective's old policy kept beside it (NFT)."""
    folder = previous_lora_dir(wildcards)
    if OBJECTIVE.rollout_adapter == "current" or int(wildcards.it) == 0:
        return folder
    return f"{folder}/{OBJECTIVE.rollout_adapter}"


@job_function
def rollout_lora_input(wildcards):
    if OBJECTIVE.rollout_adapter == "current" or int(wildcards.it) == 0:
        return previous_lora_input(wildcards)
    return [f"{rollout_lora_dir(wildcards)}/{LORA_WEIGHTS}"]


@job_function
def previous_extra_adapters_input(wildcards):
    """model(it-1)'s weight sets beside its LoRA (NFT's old policy), which training continues."""
    it = int(wildcards.it)
    return list(extra_adapter_files(checkpoint_dir(it - 1)).values()) if it > 0 else []


def extra_adapter_files(folder):
    """{name: LoRA file} of the weight sets the objective keeps beside the LoRA in ``folder``."""
    return {name: f"{folder}/{name}/{LORA_WEIGHTS}" for name in EXTRA_ADAPTERS}


# The encoded offline pairs (data.offline_pairs), when configured: train's input, and its params.
OFFLINE_PAIRS_FILE = f"{OFFLINE_DIR}/{layout.signal_table('pairs')}" if config["data"]["offline_pairs"] else None
OFFLINE_LATENTS_FILE = f"{OFFLINE_DIR}/{layout.LATENTS}" if config["data"]["offline_pairs"] else None
OFFLINE_PAIRS_INPUT = [OFFLINE_PAIRS_FILE, OFFLINE_LATENTS_FILE] if config["data"]["offline_pairs"] else []


# resources.group: iteration makes one iteration's stages, from its rollouts to its eval, one Snakemake
# group (preflight joins iteration 0's), which a cluster executor submits as one job. Cheap steps between
# them then run inside that job rather than on the submitting host: a group holding a local rule would
# run whole on the submitting host. The group closes with eval(it): the next iteration's rollouts read
# model(it), and its training waits for guard(it), which reads that eval, either way.
GROUPED = config["resources"]["group"] == "iteration"
ITERATION_GROUP = "iteration_{it}" if GROUPED else None
LOCAL_UNLESS_GROUPED = not GROUPED


# Rule preflight (rules/preflight.smk) checks iteration 0's rollouts against training before it trains;
# preflight.enabled null: on for the objectives that declare checks (objectives/alignment.py).
PREFLIGHT_ENABLED = (bool(OBJECTIVE.preflight_checks) if config["preflight"]["enabled"] is None
                     else config["preflight"]["enabled"])
PREFLIGHT_FIGURES = f"{iter_dir(0)}/{layout.PREFLIGHT_FIGURES}"
PREFLIGHT_REPORT = f"{iter_dir(0)}/{layout.PREFLIGHT_REPORT}"


ITERATION_0 = SimpleNamespace(it="000")  # the wildcards iteration 0's input functions read
PREFLIGHT_GROUP = ITERATION_GROUP.format(it=ITERATION_0.it) if GROUPED else None  # iteration 0's group


def _at_iteration_0(input_function):
    """An input function of the iteration-0 rule preflight, which has no wildcards."""
    return lambda wildcards: input_function(ITERATION_0)


@job_function
def preflight_input(wildcards):
    """Iteration 0's preflight figures and verdict, when preflight is on: a failed verdict stops train(0).

    The verdict is ancient, so that a new verdict (a changed tolerance) never reruns a finished training;
    the figures are not: a rerun measurement (train's sections changed) reruns training too. (Ancient
    alone would not do: Snakemake skips the own rerun checks of every job downstream of one that reruns,
    so a changed train.dpo.beta would rerun the preflight but not train.)
    """
    if not PREFLIGHT_ENABLED or int(wildcards.it) != 0:
        return []
    return [PREFLIGHT_FIGURES, ancient(PREFLIGHT_REPORT)]


# What train learns from (pairs.parquet or advantages.parquet, by train.loss) and its in-stage state,
# as patterns of the {it} wildcard. (A folder param that is a prefix of the job's files stays a function:
# as a plain string, `snakemake --lint` asks for one.)
TRAIN_SIGNAL = f"{ITER}/{layout.signal_table(SIGNAL)}"
TRAIN_STATE_DIR = f"{ITER}/{layout.TRAIN_STATE_DIR}"


@job_function
def train_dir(wildcards):
    return f"{iter_dir(wildcards.it)}/{layout.TRAIN_DIR}"


@job_function
def checkpoint_dir_of(wildcards):
    return checkpoint_dir(wildcards.it)


@job_function
def iteration_of(wildcards):
    return int(wildcards.it)


@job_function
def iteration_metrics(wildcards):
    """metrics/<stage>.json of every stage of the iteration, and of its evals at further guidance
    scales (what track_iteration logs)."""
    return [metrics_file(stage, iter_dir(wildcards.it)) for stage in (*STAGES, *GUIDANCE_EVAL_CFG)]


@job_function
def iteration_benchmarks(wildcards):
    """{stage: benchmark TSV} of the iteration; read when present, not inputs (Snakemake writes them)."""
    return {stage: RUN.benchmark(layout.iteration_name(wildcards.it), stage) for stage in STAGES}


def base_benchmark(wildcards):
    return (SHARED_RUN or RUN).benchmark(layout.BASE, layout.EVAL_STAGE)


@job_function
def iteration_label(wildcards):
    return f"iteration {int(wildcards.it)}"


def all_iterations_metrics(stage):
    """An input function: metrics/<stage>.json of every configured iteration, in order."""

    def inputs(wildcards):
        return [metrics_file(stage, iter_dir(it)) for it in range(config["iterations"])]

    return inputs


@job_function
def shard_index(wildcards):
    return int(wildcards.shard)


# generate.shards and score.shards: each stage's work rule, whole or in shards (src/rewardloop/runtime/sharding.py)
GENERATE_SHARDING = StageSharding("generate", config["generate"]["shards"], shard_index)
SCORE_SHARDING = StageSharding("score", config["score"]["shards"], shard_index)
RESCORE_SHARDING = StageSharding("rescore", config["score"]["shards"], shard_index)


# ------------------------------------------------------------------ the monitors (rules/monitors.smk)
# Gold rewards, image health and the guard; see docs/monitors.md.

GOLD_REWARDS = config["gold_rewards"]
GUARD = config["guard"]


@job_function
def folder_iteration(wildcards):
    return layout.folder_iteration(wildcards.folder)


@job_function
def folder_images(wildcards):
    """{source: table} of a folder's images: the eval images, and an iteration's rollouts."""
    folder = RUN.folder(wildcards.folder)
    tables = {"eval": f"{folder}/{layout.EVAL_TABLE}"}
    if wildcards.folder != layout.BASE:
        tables = {"rollout": f"{folder}/{layout.SAMPLES}", **tables}
    return tables


@job_function
def gold_rescore_config(wildcards):
    """What the rescore job of one gold reward reads (src/rewardloop/runtime/job_config.py)."""
    return rescore_config(config, wildcards.gold)


@job_function
def guidance_eval_cfg(wildcards):
    """What an eval at a further guidance scale (eval.also_at_guidance) reads."""
    return GUIDANCE_EVAL_CFG[wildcards.guidance_eval]


def gold_files(folder, suffix="json"):
    """{gold reward: its rescore file} of a folder (a folder name, or the {folder} pattern)."""
    return {name: f"{RUN.folder(folder)}/{layout.rescore_name(name, suffix)}" for name in GOLD_REWARDS}


# The folders the monitors watch: base/, then every iteration's.
MONITORED_FOLDERS = [layout.folder_name(it) for it in range(layout.BASE_ITERATION, config["iterations"])]


def monitor_targets():
    """What rules/common.smk's all_targets() adds: every folder's health, rescores and guard verdicts."""
    folders = MONITORED_FOLDERS
    targets = [f"{RUN.folder(folder)}/{layout.HEALTH}" for folder in folders]
    targets += [path for folder in folders for suffix in ("parquet", "json")
                for path in gold_files(folder, suffix).values()]
    if GUARD["enabled"]:
        targets += [f"{RUN.folder(folder)}/{layout.GUARD_VERDICT}" for folder in folders[1:]]
    targets.append(RUN.report(layout.HEALTH_FIGURE))
    if config["export"]["best"]:
        targets.append(RUN.best_file)
    return targets


@job_function
def previous_guard_input(wildcards):
    """train(it) waits for iteration it-1's guard verdict (guard.enabled); ancient: a rerun of it never
    reruns training."""
    it = int(wildcards.it)
    return [ancient(f"{iter_dir(it - 1)}/{layout.GUARD_VERDICT}")] if GUARD["enabled"] and it > 0 else []


# rewardloop: iterative online reward fine-tuning of text-to-image diffusion models.
# Each iteration it: generate -> score -> pairs | advantages -> train -> export (= model(it)); eval beside.
# Usage: snakemake --cores 2 [--configfile configs/<recipe>.yaml] [--config iterations=5]

import copy
import re
import sys
from pathlib import Path

from rewardloop.host import cpu_kernels, input_links
from rewardloop.runtime import canonical_params, job_records, previous_versions, prompt_pins, runlock, warm
from rewardloop.artifacts import remove_stale_temps
from rewardloop.config import check_existing_iterations, check_results_layout, check_train_nodes, startup_warnings
from rewardloop.config import validate as validate_config
from rewardloop.models.loading import check_device, check_gpu_count, needs_hf_token
from rewardloop.runtime.resources import rule_overrides, train_gpus


configfile: f"{workflow.basedir}/config.yaml"


report: "report/workflow.rst"


# Schema (defaults filled, unknown keys refused) and file checks, before any job starts; no fewer
# iterations than results/ already holds, and no second layout (single run / fan-out) beside the one
# there. The config as given is kept: an experiments fan-out merges each variant's overlay over it
# (rules/experiments.smk).
GIVEN_CONFIG = copy.deepcopy(config)
# Jobs read the model and checkpoints by content, through links (the main process places them at onstart).
input_links.use(defer=workflow.is_main_process)
validate_config(config)
# The CPU kernels every job computes with, in the environment the jobs inherit (nothing has computed yet).
KERNEL_LINES = cpu_kernels.pin(config["cpu_kernels"], config["device"])
check_existing_iterations(config, "results")
check_results_layout(config, "results")  # a single run's layout or a fan-out's, not both
if workflow.is_main_process:  # not again in every job of a cluster run
    for line in [*KERNEL_LINES, *startup_warnings(config)]:
        print(line, file=sys.stderr)


# A run that was killed may have removed finished files it was about to replace: they come back from
# the links it kept, before anything is planned (src/rewardloop/runtime/previous_versions.py).
if workflow.is_main_process and runlock.is_free("results"):
    restored = previous_versions.restore_left_over("results")
    if restored:
        print(restored, file=sys.stderr)
# Snakemake's records of the finished files (what their jobs' params were), given back from results/'s
# own copy if .snakemake/ was removed: a changed config still reruns what it changes (runtime/job_records.py).
if workflow.is_main_process:
    restored = job_records.restore_missing("results")
    if restored:
        print(restored, file=sys.stderr)
    # records of an older version, whose params list a dict's keys as the config did: made canonical once
    canonical_params.canonicalize_records(job_records.METADATA)
KEPT = None  # this run's links to the finished files (onstart), restored if a job fails (onerror)


# A gated hub model (SD3.5) needs a Hugging Face token: Snakemake passes HF_TOKEN from the
# environment to every job (also on a cluster); it is never written to params, logs or MLflow.
if needs_hf_token(config["model"]):

    envvars:
        "HF_TOKEN",


# One run per results folder, taken when jobs are about to run (not for -n or --lint) and
# released by the kernel however this process ends (see src/rewardloop/runtime/runlock.py). Holding it,
# before any job starts, remove the temp files that killed jobs left (artifacts are renamed into
# place when complete, so a temp is never mistaken for a result; this frees the space).
onstart:
    # Jobs that run on this host need its device: a missing GPU stops the run here, before Snakemake
    # deletes the outputs of the first job to redo (a cluster job checks its node's, models/loading.py).
    if workflow.local_exec:
        check_device(config["device"])
        check_gpu_count(config["device"], train_gpus(config), "train.num_processes")
        check_train_nodes(config, TRAIN_RESOURCES, local_run=True)
    runlock.acquire("results")
    # The links by which jobs read the model and checkpoints by content (src/rewardloop/host/input_links.py).
    input_links.place_all()
    stale = remove_stale_temps("results")
    if stale:
        print(f"rewardloop: removed {stale} temp file(s) left by killed jobs under results/")
    # Finished files that jobs replace stay linked until the run ends, and come back if a job fails.
    global KEPT
    KEPT = previous_versions.Kept("results", workflow.persistence)
    KEPT.keep()
    # Local jobs run in forks of one worker that imported torch & co once (src/rewardloop/runtime/warm.py);
    # not on a cluster, nor with --sdm conda/apptainer (the jobs' Python is another one).
    if config["warm_start"] and workflow.local_exec and not workflow.deployment_settings.deployment_method:
        warm.start("results/logs/warm_worker.log", tracking=config["tracking"]["enabled"])


# The end of a run that ran jobs (Snakemake calls neither hook on "Nothing to be done"): the failure
# lines of tracking and the guard on stderr, then (on success) what happened and where to look on
# stdout: the summary table, or a fan-out's comparison headline (src/rewardloop/reports/end_of_run.py).
onsuccess:
    warm.stop()
    job_records.keep("results")
    if KEPT:
        KEPT.release()
    from rewardloop import tracking
    from rewardloop.reports import end_of_run

    from rewardloop.monitors import history

    for folder in RUN_FOLDERS:
        tracking.report(folder)  # one line on stderr when a tracking marker says failed
        history.report(folder)  # one line naming every iteration whose guard found a breach
    end_of_run.show(RUN_FOLDERS, fanout_results=RESULTS if config["experiments"] else None)


onerror:
    warm.stop()
    restored = KEPT.restore(run_records=RUN_RECORDS) if KEPT else None
    if restored:
        print(restored, file=sys.stderr)
    job_records.keep("results")  # after the restore: the records of the files given back are Snakemake's again
    from rewardloop import tracking

    from rewardloop.monitors import history

    for folder in RUN_FOLDERS:
        tracking.report(folder)
        history.report(folder)


# Jobs read each prompt set from its pin, results/prompts/<key>-<digest>.jsonl: the same prompts are the same
# file however the configured one is spelled, moved or saved (src/rewardloop/runtime/prompt_pins.py). A fan-out
# pins its own and each run's once its variants are checked against the config as validated (rules/experiments.smk).
VALIDATED_CONFIG = copy.deepcopy(config)


# One run writes results/iter_XXX/ (rules/run.smk); with `experiments:`, every variant × seed is such a
# run under results/<experiment>/seed_<s>/, beside one shared model build and base eval.
if config["experiments"]:

    include: "rules/experiments.smk"

else:
    PROMPT_PINS = prompt_pins.pin_config(config, "results")

    include: "rules/run.smk"

    RUN_FOLDERS = [RESULTS]

# Records of runs finished before prompt sets were pinned name the configured files: rewritten once to their pins.
if workflow.is_main_process:
    prompt_pins.migrate_records(job_records.METADATA, PROMPT_PINS)

# A prompt set no pin holds yet (a new run, changed prompts): its pin, written by a job (planning writes nothing).
PINNED_SOURCES = {pin: source for source, pin in PROMPT_PINS.items()}


rule pin_prompts:
    localrule: True
    output:
        f"results/{prompt_pins.FOLDER}/{{pin}}.jsonl",
    wildcard_constraints:
        pin="|".join(re.escape(Path(pin).stem) for pin in PINNED_SOURCES) or "(?!)",
    log:
        f"results/logs/{prompt_pins.FOLDER}/{{pin}}.log",
    benchmark:
        f"results/benchmarks/{prompt_pins.FOLDER}/{{pin}}.tsv"
    run:
        prompt_pins.write_pin(PINNED_SOURCES[output[0]], output[0])

# What describes a whole run (its recorded config): a failed run puts back the version it replaced (onerror).
RUN_RECORDS = [layout.RunLayout(folder).report(layout.RUN_CONFIG) for folder in RUN_FOLDERS]


# A train job over several nodes (set-resources train: nodes: N, from a profile or the command line) must be one
# the cluster can place and the job can launch (config/checks.py); refused here, before any job is planned.
TRAIN_RESOURCES = rule_overrides(workflow.resource_settings, "train")
check_train_nodes(config, TRAIN_RESOURCES)


# A finished job reruns when its params' values change, never when only the order of a config's keys does:
# every rule's params compare in a canonical form (src/rewardloop/runtime/canonical_params.py).
canonical_params.apply(workflow.rules)
# Every job's software environment (used with --sdm conda), named once instead of in each rule: Snakemake's
# workflow-level `conda:` directive sets up the main process's environment, not the jobs'.
for job_rule in workflow.rules:
    if job_rule.script and not job_rule.conda_env:
        job_rule.conda_env = f"{workflow.basedir}/envs/rewardloop.yaml"


rule all:
    input:
        FANOUT_TARGETS if config["experiments"] else all_targets(),
    default_target: True

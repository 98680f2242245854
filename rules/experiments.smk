# An experiments fan-out (`experiments:` × `seeds:` in the config): every variant × seed is a module
# of rules/run.smk writing results/<experiment>/seed_<s>/ (its rules' names prefixed <experiment>_seed<s>_).
# The model build and the base model's eval run once, here, in results/base/; the runs copy that eval
# in (rule share_base). Then one comparison of them all: results/report/compare.csv and its figure.

from rewardloop.experiments import plan_runs

# Each variant's overlay merged over the config as given, validated, and checked to change nothing
# the shared build or base eval reads (src/rewardloop/experiments.py).
RUNS = plan_runs(GIVEN_CONFIG, VALIDATED_CONFIG)
RUN_FOLDERS = [run.folder for run in RUNS]
for run in RUNS:
    check_existing_iterations(run.config, run.folder)
# The prompt sets' pins (src/rewardloop/runtime/prompt_pins.py), once every variant is known to be valid
PROMPT_PINS = prompt_pins.pin_config(config, "results")
for run in RUNS:
    PROMPT_PINS.update(prompt_pins.pin_config(run.config, "results"))


include: "common.smk"
include: "model.smk"
include: "base.smk"


# A profile's set-resources/set-threads name one run's rules (train, generate_shard, ...): the runs'
# prefixed rules get the same (src/rewardloop/runtime/resources.py).
job_gpus.extend_rule_settings(workflow.resource_settings, [run.module for run in RUNS])

for run in RUNS:
    run_module = run.module

    module:
        name: run_module
        snakefile: "run.smk"
        config: run.config

    use rule * from run_module as run_module*


# What `rewardloop compare` reads of every run (and the shared base eval).
COMPARISON_INPUTS = [metrics_file(name, BASE_DIR) for name in ("eval", *GUIDANCE_EVAL_CFG)] + [
    metrics_file(stage, layout.RunLayout(run.folder).iteration(it)) for run in RUNS for it in range(run.config["iterations"])
    for stage in ("generate", "train", "eval", *GUIDANCE_EVAL_CFG)]


rule compare_experiments:
    localrule: True
    input:
        COMPARISON_INPUTS,
    output:
        table=RUN.report(layout.COMPARE_TABLE),
        figure=report(
            RUN.report(layout.COMPARE_FIGURE),
            caption="../report/experiments.rst",
            category="experiments",
            labels={"figure": "eval reward per experiment (mean and 95% interval over seeds)"},
        ),
    params:
        runs={name: [run.seed for run in RUNS if run.experiment == name] for name in dict.fromkeys(r.experiment for r in RUNS)},
    log:
        RUN.log(layout.REPORT, "compare_experiments"),
    benchmark:
        RUN.benchmark(layout.REPORT, "compare_experiments")
    threads: 1
    resources:
        **TABLE_JOB,
    script:
        "../scripts/compare_experiments.py"


# What the Snakefile's rule all asks for: every run's targets, then the comparison.
FANOUT_TARGETS = [path for run in RUNS for path in rules.__getattr__(f"{run.module}targets").input]
FANOUT_TARGETS += [RUN.report(layout.COMPARE_TABLE), RUN.report(layout.COMPARE_FIGURE)]

# Watching for reward hacking (docs/monitors.md): gold rewards rescore the archived images, the guard
# that compares each iteration with the base model, the report's health figure, and (export.best) the
# results/best link. Each folder's image-health statistics are written by its eval job (rules/eval.smk,
# rules/base.smk), and its monitors are logged to MLflow by its tracking job (rules/tracking.smk).
# None of them is an input of a stage, except guard.json of iteration it-1 for train(it), and that
# one as ancient(): a guard rerun (a gold reward added, a threshold changed) never reruns training.

wildcard_constraints:
    folder=layout.FOLDER_REGEX,
    gold=r"[A-Za-z0-9_]+",

FOLDER = RUN.folder("{folder}")  # base/ or an iteration's folder, as a pattern
GOLD_TABLE, GOLD_METRICS = (f"{FOLDER}/{layout.rescore_name('{gold}', suffix)}" for suffix in ("parquet", "json"))


# With score.shards > 1, rescore_shard jobs each score a run of whole batches of the folder's images
# (rollouts, then eval images) and rule rescore gathers them, as for scoring (StageSharding, src/rewardloop/runtime/sharding.py).

rule:
    name: RESCORE_SHARDING.work_rule
    input:
        unpack(folder_images),
    output:
        table=RESCORE_SHARDING.output(FOLDER, "{gold}.parquet", whole=GOLD_TABLE),
        metrics=RESCORE_SHARDING.output(FOLDER, "{gold}.json", whole=GOLD_METRICS),
    params:
        cfg=gold_rescore_config,
        iteration=folder_iteration,
        **RESCORE_SHARDING.params(),
    log:
        RUN.log("{folder}", RESCORE_SHARDING.job("rescore_{gold}")),
    benchmark:
        RUN.benchmark("{folder}", RESCORE_SHARDING.job("rescore_{gold}"))
    threads: config["resources"]["threads"]
    resources:
        **job_resources(config, gpu=job_gpus.score_gpus(config)),
    script:
        "../scripts/rescore.py"


if RESCORE_SHARDING.sharded:

    rule rescore:
        localrule: True
        input:
            tables=RESCORE_SHARDING.gathered(FOLDER, "{gold}.parquet"),
            metrics=RESCORE_SHARDING.gathered(FOLDER, "{gold}.json"),
        output:
            table=GOLD_TABLE,
            metrics=GOLD_METRICS,
        params:
            cfg=gold_rescore_config,
        log:
            RUN.log("{folder}", "rescore_{gold}"),
        benchmark:
            RUN.benchmark("{folder}", "rescore_{gold}")
        threads: 1
        resources:
            **gather_resources(config),
        script:
            "../scripts/gather_rescore.py"


rule guard:
    localrule: True
    input:
        base_health=f"{BASE_DIR}/{layout.HEALTH}",
        health=f"{ITER}/{layout.HEALTH}",
        base_eval=metrics_file("eval", BASE_DIR),
        eval=metrics_file("eval"),
        base_gold=list(gold_files(layout.BASE).values()),
        gold=list(gold_files(ITER_NAME).values()),
    output:
        verdict=f"{ITER}/{layout.GUARD_VERDICT}",
    params:
        cfg=GUARD,
        iteration=iteration_of,
        gold_names=list(GOLD_REWARDS),
    log:
        RUN.log(ITER_NAME, "guard"),
    benchmark:
        RUN.benchmark(ITER_NAME, "guard")
    threads: 1
    resources:
        **LIGHT_JOB,
    script:
        "../scripts/guard.py"


rule plot_health:
    localrule: True
    input:
        health=[f"{BASE_DIR}/{layout.HEALTH}"]
        + [f"{iter_dir(it)}/{layout.HEALTH}" for it in range(config["iterations"])],
        gold=[path for folder in MONITORED_FOLDERS
              for path in gold_files(folder).values()],
        evals=all_iterations_metrics("eval"),
    output:
        figure=report(
            RUN.report(layout.HEALTH_FIGURE),
            caption="../report/health.rst",
            category="curves",
            labels={"figure": "image health and gold rewards"},
        ),
    params:
        results=lambda wildcards, output: str(Path(output.figure).parents[1]),
    log:
        RUN.log(layout.REPORT, "plot_health"),
    benchmark:
        RUN.benchmark(layout.REPORT, "plot_health")
    threads: 1
    resources:
        **TABLE_JOB,
    script:
        "../scripts/plot_health.py"


rule best:
    localrule: True
    input:
        evals=all_iterations_metrics("eval"),
        checkpoints=[f"{checkpoint_dir(it)}/{CHECKPOINT_FILE}" for it in range(config["iterations"])],
        verdicts=[f"{iter_dir(it)}/{layout.GUARD_VERDICT}" for it in range(config["iterations"])] if GUARD["enabled"] else [],
    output:
        best=RUN.best_file,
    params:
        results=lambda wildcards, output: str(Path(output.best).parent),
        guard=GUARD["enabled"],
    log:
        RUN.log(layout.REPORT, "best"),
    benchmark:
        RUN.benchmark(layout.REPORT, "best")
    threads: 1
    resources:
        **LIGHT_JOB,
    script:
        "../scripts/best.py"

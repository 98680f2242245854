# Watching for reward hacking (docs/monitors.md): gold rewards rescore the archived images, image-health
# statistics of every folder's images, the guard that compares each iteration with the base model,
# the report's health figure, the MLflow logging of all of it, and (export.best) the results/best link.
# None of them is an input of a stage, except guard.json of iteration it-1 for train(it), and that
# one as ancient(): a guard rerun (a gold reward added, a threshold changed) never reruns training.

wildcard_constraints:
    folder=r"base|iter_\d{3}",
    gold=r"[A-Za-z0-9_]+",


# With score.shards > 1, rescore_shard jobs each score a run of whole batches of the folder's images
# (rollouts, then eval images) and rule rescore gathers them, as for scoring (rules/score.smk).
if config["score"]["shards"] == 1:

    rule rescore:
        input:
            unpack(folder_images),
        output:
            table=f"{RESULTS}/{{folder}}/rescore/{{gold}}.parquet",
            metrics=f"{RESULTS}/{{folder}}/rescore/{{gold}}.json",
        params:
            cfg=rescore_config,
            iteration=folder_iteration,
        log:
            f"{RESULTS}/logs/{{folder}}/rescore_{{gold}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/{{folder}}/rescore_{{gold}}.tsv"
        threads: config["resources"]["threads"]
        resources:
            **job_resources(gpu=job_gpus.score_gpus(config)),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/rescore.py"

else:

    rule rescore_shard:
        input:
            unpack(folder_images),
        output:
            table=f"{RESULTS}/{{folder}}/shards/rescore_{{shard}}/{{gold}}.parquet",
            metrics=f"{RESULTS}/{{folder}}/shards/rescore_{{shard}}/{{gold}}.json",
        params:
            cfg=rescore_config,
            iteration=folder_iteration,
            shard=shard_index,
            shards=config["score"]["shards"],
        log:
            f"{RESULTS}/logs/{{folder}}/rescore_{{gold}}_{{shard}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/{{folder}}/rescore_{{gold}}_{{shard}}.tsv"
        threads: config["resources"]["threads"]
        resources:
            **job_resources(gpu=job_gpus.score_gpus(config)),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/rescore.py"

    rule rescore:
        localrule: True
        input:
            tables=rescore_shard_outputs("parquet"),
            metrics=rescore_shard_outputs("json"),
        output:
            table=f"{RESULTS}/{{folder}}/rescore/{{gold}}.parquet",
            metrics=f"{RESULTS}/{{folder}}/rescore/{{gold}}.json",
        params:
            cfg=rescore_config,
        log:
            f"{RESULTS}/logs/{{folder}}/rescore_{{gold}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/{{folder}}/rescore_{{gold}}.tsv"
        threads: 1
        resources:
            mem_mb=config["resources"]["mem_mb"],
            runtime=10,
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/gather_rescore.py"


rule health:
    localrule: True
    input:
        unpack(folder_images),
    output:
        health=f"{RESULTS}/{{folder}}/health.parquet",
    params:
        iteration=folder_iteration,
    log:
        f"{RESULTS}/logs/{{folder}}/health.log",
    benchmark:
        f"{RESULTS}/benchmarks/{{folder}}/health.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/health.py"


rule guard:
    localrule: True
    input:
        base_health=f"{RESULTS}/base/health.parquet",
        health=f"{RESULTS}/iter_{{it}}/health.parquet",
        base_eval=f"{RESULTS}/base/metrics/eval.json",
        eval=f"{RESULTS}/iter_{{it}}/metrics/eval.json",
        base_gold=list(gold_files("base").values()),
        gold=[f"{RESULTS}/iter_{{it}}/rescore/{name}.json" for name in GOLD_REWARDS],  # gold_files(iter_{it})
    output:
        verdict=f"{RESULTS}/iter_{{it}}/guard.json",
    params:
        cfg=GUARD,
        iteration=iteration_of,
        gold_names=list(GOLD_REWARDS),
    log:
        f"{RESULTS}/logs/iter_{{it}}/guard.log",
    benchmark:
        f"{RESULTS}/benchmarks/iter_{{it}}/guard.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/guard.py"


rule plot_health:
    localrule: True
    input:
        health=[f"{RESULTS}/base/health.parquet"]
        + [f"{iter_dir(it)}/health.parquet" for it in range(config["iterations"])],
        gold=[path for folder in ["base"] + [f"iter_{it:03d}" for it in range(config["iterations"])]
              for path in gold_files(folder).values()],
        evals=all_iterations_metrics("eval"),
    output:
        figure=report(
            f"{REPORT_DIR}/health.png",
            caption="../report/health.rst",
            category="curves",
            labels={"figure": "image health and gold rewards"},
        ),
    params:
        results=lambda wildcards, output: str(Path(output.figure).parents[1]),
    log:
        f"{RESULTS}/logs/report/plot_health.log",
    benchmark:
        f"{RESULTS}/benchmarks/report/plot_health.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/plot_health.py"


rule track_monitors:
    localrule: True
    input:
        unpack(monitors_tracking_inputs),
    output:
        marker=f"{RESULTS}/{{folder}}/monitors_tracking.json",
    params:
        iteration=folder_iteration,
    log:
        f"{RESULTS}/logs/{{folder}}/monitors_tracking.log",
    benchmark:
        f"{RESULTS}/benchmarks/{{folder}}/monitors_tracking.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/track_monitors.py"


rule best:
    localrule: True
    input:
        evals=all_iterations_metrics("eval"),
        checkpoints=[f"{checkpoint_dir(it)}/{CHECKPOINT_FILE}" for it in range(config["iterations"])],
        verdicts=[f"{iter_dir(it)}/guard.json" for it in range(config["iterations"])] if GUARD["enabled"] else [],
    output:
        best=f"{RESULTS}/best.json",
    params:
        results=lambda wildcards, output: str(Path(output.best).parent),
        guard=GUARD["enabled"],
    log:
        f"{RESULTS}/logs/report/best.log",
    benchmark:
        f"{RESULTS}/benchmarks/report/best.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/best.py"

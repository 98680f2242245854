# Rewards of every rollout sample (combined and per component).
# With score.shards > 1, score_shard jobs each score a run of whole batches and rule score gathers them
# (see StageSharding in src/rewardloop/runtime/sharding.py).


rule:
    name: SCORE_SHARDING.work_rule
    group: ITERATION_GROUP
    input:
        samples=f"{ITER}/{layout.SAMPLES}",
    output:
        scores=SCORE_SHARDING.output(ITER, layout.SCORES),
        metrics=SCORE_SHARDING.output(ITER, layout.SHARD_METRICS, whole=metrics_file("score")),
    params:
        cfg=stage_config(config, "rewards", "score"),
        **SCORE_SHARDING.params(),
    log:
        RUN.log(ITER_NAME, SCORE_SHARDING.job("score")),
    benchmark:
        RUN.benchmark(ITER_NAME, SCORE_SHARDING.job("score"))
    threads: config["resources"]["threads"]
    resources:
        **job_resources(config, gpu=job_gpus.score_gpus(config)),
    script:
        "../scripts/score.py"


if SCORE_SHARDING.sharded:

    rule score:
        group: ITERATION_GROUP
        localrule: LOCAL_UNLESS_GROUPED
        input:
            scores=SCORE_SHARDING.gathered(ITER, layout.SCORES),
            metrics=SCORE_SHARDING.gathered(ITER, layout.SHARD_METRICS),
        output:
            scores=f"{ITER}/{layout.SCORES}",
            metrics=metrics_file("score"),
        log:
            RUN.log(ITER_NAME, "score"),
        benchmark:
            RUN.benchmark(ITER_NAME, "score")
        threads: 1
        resources:
            **gather_resources(config),
        script:
            "../scripts/gather_scores.py"

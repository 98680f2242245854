# Rewards of every rollout sample (combined and per component).
# With score.shards > 1, score_shard jobs each score a run of whole batches and rule score gathers them.

SCORE_CFG = stage_config(config, "rewards", "score")


if config["score"]["shards"] == 1:

    rule score:
        group: ITERATION_GROUP
        input:
            samples=f"{ITER}/{layout.SAMPLES}",
        output:
            scores=f"{ITER}/{layout.SCORES}",
            metrics=metrics_file("score"),
        params:
            cfg=SCORE_CFG,
        log:
            RUN.log(ITER_NAME, "score"),
        benchmark:
            RUN.benchmark(ITER_NAME, "score")
        threads: config["resources"]["threads"]
        resources:
            **job_resources(gpu=job_gpus.score_gpus(config)),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/score.py"

else:

    rule score_shard:
        group: ITERATION_GROUP
        input:
            samples=f"{ITER}/{layout.SAMPLES}",
        output:
            scores=f"{ITER}/{layout.shard_name('score', '{shard}')}/{layout.SCORES}",
            metrics=f"{ITER}/{layout.shard_name('score', '{shard}')}/{layout.SHARD_METRICS}",
        params:
            cfg=SCORE_CFG,
            shard=shard_index,
            shards=config["score"]["shards"],
        log:
            RUN.log(ITER_NAME, "score_{shard}"),
        benchmark:
            RUN.benchmark(ITER_NAME, "score_{shard}")
        threads: config["resources"]["threads"]
        resources:
            **job_resources(gpu=job_gpus.score_gpus(config)),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/score.py"

    rule score:
        group: ITERATION_GROUP
        localrule: LOCAL_UNLESS_GROUPED
        input:
            scores=shard_outputs("score", layout.SCORES),
            metrics=shard_outputs("score", layout.SHARD_METRICS),
        output:
            scores=f"{ITER}/{layout.SCORES}",
            metrics=metrics_file("score"),
        log:
            RUN.log(ITER_NAME, "score"),
        benchmark:
            RUN.benchmark(ITER_NAME, "score")
        threads: 1
        resources:
            mem_mb=config["resources"]["mem_mb"],
            runtime=10,
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/gather_scores.py"

# Rewards of every rollout sample (combined and per component).
# With score.shards > 1, score_shard jobs each score a run of whole batches and rule score gathers them.

SCORE_CFG = stage_config(config, "rewards", "score")


if config["score"]["shards"] == 1:

    rule score:
        input:
            samples=f"{RESULTS}/iter_{{it}}/samples.parquet",
        output:
            scores=f"{RESULTS}/iter_{{it}}/scores.parquet",
            metrics=f"{RESULTS}/iter_{{it}}/metrics/score.json",
        params:
            cfg=SCORE_CFG,
        log:
            f"{RESULTS}/logs/iter_{{it}}/score.log",
        benchmark:
            f"{RESULTS}/benchmarks/iter_{{it}}/score.tsv"
        threads: config["resources"]["threads"]
        resources:
            **job_resources(gpu=job_gpus.score_gpus(config)),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/score.py"

else:

    rule score_shard:
        input:
            samples=f"{RESULTS}/iter_{{it}}/samples.parquet",
        output:
            scores=f"{RESULTS}/iter_{{it}}/shards/score_{{shard}}/scores.parquet",
            metrics=f"{RESULTS}/iter_{{it}}/shards/score_{{shard}}/metrics.json",
        params:
            cfg=SCORE_CFG,
            shard=shard_index,
            shards=config["score"]["shards"],
        log:
            f"{RESULTS}/logs/iter_{{it}}/score_{{shard}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/iter_{{it}}/score_{{shard}}.tsv"
        threads: config["resources"]["threads"]
        resources:
            **job_resources(gpu=job_gpus.score_gpus(config)),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/score.py"

    rule score:
        localrule: True
        input:
            scores=shard_outputs("score", "scores.parquet"),
            metrics=shard_outputs("score", "metrics.json"),
        output:
            scores=f"{RESULTS}/iter_{{it}}/scores.parquet",
            metrics=f"{RESULTS}/iter_{{it}}/metrics/score.json",
        log:
            f"{RESULTS}/logs/iter_{{it}}/score.log",
        benchmark:
            f"{RESULTS}/benchmarks/iter_{{it}}/score.tsv"
        threads: 1
        resources:
            mem_mb=config["resources"]["mem_mb"],
            runtime=10,
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/gather_scores.py"

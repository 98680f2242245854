# Rewards of every rollout sample (combined and per component).


rule score:
    input:
        samples=f"{RESULTS}/iter_{{it}}/samples.parquet",
    output:
        scores=f"{RESULTS}/iter_{{it}}/scores.parquet",
        metrics=f"{RESULTS}/iter_{{it}}/metrics/score.json",
    params:
        cfg=stage_config(config, "rewards", "score"),
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

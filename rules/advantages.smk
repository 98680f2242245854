# GRPO group advantages (train.loss grpo/nft; cheap: runs on the submitting host).


localrules:
    advantages,


rule advantages:
    input:
        scores=f"{RESULTS}/iter_{{it}}/scores.parquet",
    output:
        advantages=f"{RESULTS}/iter_{{it}}/advantages.parquet",
        metrics=f"{RESULTS}/iter_{{it}}/metrics/advantages.json",
    params:
        cfg=stage_config(config, "advantages"),
    log:
        f"{RESULTS}/logs/iter_{{it}}/advantages.log",
    benchmark:
        f"{RESULTS}/benchmarks/iter_{{it}}/advantages.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/advantages.py"

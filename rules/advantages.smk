# Group advantages, the signal of the objectives trained on them (grpo, nft, awm; cheap: runs on the submitting host).


rule advantages:
    localrule: True
    input:
        scores=f"{RESULTS}/iter_{{it}}/scores.parquet",
    output:
        advantages=f"{RESULTS}/iter_{{it}}/advantages.parquet",
        metrics=f"{RESULTS}/iter_{{it}}/metrics/advantages.json",
    params:
        cfg=stage_config(config, "advantages"),
        keep_tied_groups=OBJECTIVE.keeps_tied_groups,
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

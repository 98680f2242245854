# Preference pairs per prompt group (cheap: runs on the submitting host).


rule pairs:
    localrule: True
    input:
        scores=f"{RESULTS}/iter_{{it}}/scores.parquet",
    output:
        pairs=f"{RESULTS}/iter_{{it}}/pairs.parquet",
        metrics=f"{RESULTS}/iter_{{it}}/metrics/pairs.json",
    params:
        cfg=stage_config(config, "pairs"),
    log:
        f"{RESULTS}/logs/iter_{{it}}/pairs.log",
    benchmark:
        f"{RESULTS}/benchmarks/iter_{{it}}/pairs.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/pairs.py"

# Publish the trained LoRA as model(it), which iteration it+1 samples from.


localrules:
    export,


rule export:
    input:
        lora=f"{RESULTS}/iter_{{it}}/train/{LORA_WEIGHTS}",
    output:
        lora=f"{RESULTS}/iter_{{it}}/checkpoint/{LORA_WEIGHTS}",
        metrics=f"{RESULTS}/iter_{{it}}/metrics/export.json",
    params:
        cfg=stage_config(config, "model", "export"),
        trained_dir=train_dir,
        checkpoint_dir=checkpoint_dir_of,
    log:
        f"{RESULTS}/logs/iter_{{it}}/export.log",
    benchmark:
        f"{RESULTS}/benchmarks/iter_{{it}}/export.tsv"
    threads: 1
    resources:
        **job_resources(gpu=0),
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/export.py"

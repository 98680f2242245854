# Publish the trained LoRA as model(it), which iteration it+1 samples from.


rule export:
    localrule: True
    input:
        lora=f"{RESULTS}/iter_{{it}}/train/{TRAINED_FILE}",
        previous=previous_lora_input,
        **extra_adapter_files(f"{RESULTS}/iter_{{it}}/train"),
    output:
        lora=f"{RESULTS}/iter_{{it}}/checkpoint/{CHECKPOINT_FILE}",
        metrics=f"{RESULTS}/iter_{{it}}/metrics/export.json",
        **extra_adapter_files(f"{RESULTS}/iter_{{it}}/checkpoint"),
    params:
        cfg=export_config(),
        trained_dir=train_dir,
        checkpoint_dir=checkpoint_dir_of,
        previous_dir=previous_lora_dir,
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

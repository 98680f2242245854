# LoRA training on the iteration's pairs or advantages (by train.loss), from model(it-1). In-stage state lives in train/state/,
# which is not an output: Snakemake keeps it when the job dies, and the rerun resumes from it.


rule train:
    input:
        model=base_model_input,
        lora=previous_lora_input,
        signal=train_signal_input,
        latents=f"{RESULTS}/iter_{{it}}/latents.safetensors",
    output:
        lora=f"{RESULTS}/iter_{{it}}/train/{LORA_WEIGHTS}",
        metrics=f"{RESULTS}/iter_{{it}}/metrics/train.json",
    params:
        cfg=stage_config(config, "seed", "model", "train", "device"),
        lora_dir=previous_lora_dir,
        out_dir=train_dir,
        state_dir=train_state_dir,
    log:
        f"{RESULTS}/logs/iter_{{it}}/train.log",
    benchmark:
        f"{RESULTS}/benchmarks/iter_{{it}}/train.tsv"
    threads: config["resources"]["threads"]
    resources:
        **job_resources(),
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/train.py"

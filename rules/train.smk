# Training (LoRA, or the full UNet) on the iteration's pairs or advantages (by train.loss), from model(it-1).
# In-stage state lives in train/state/,
# which is not an output: Snakemake keeps it when the job dies, and the rerun resumes from it.


rule train:
    input:
        model=BASE_MODEL_INPUT,
        lora=previous_lora_input,
        extra=previous_extra_adapters_input,
        signal=TRAIN_SIGNAL,
        latents=f"{RESULTS}/iter_{{it}}/latents.safetensors",
        offline=OFFLINE_PAIRS_INPUT,
        preflight=preflight_input,
        guard=previous_guard_input,
    output:
        lora=f"{RESULTS}/iter_{{it}}/train/{TRAINED_FILE}",
        metrics=f"{RESULTS}/iter_{{it}}/metrics/train.json",
        **extra_adapter_files(f"{RESULTS}/iter_{{it}}/train"),
    params:
        cfg=stage_config(config, *TRAIN_SECTIONS),
        lora_dir=previous_lora_dir,
        out_dir=train_dir,
        state_dir=TRAIN_STATE_DIR,
        offline_pairs=OFFLINE_PAIRS_FILE,
        offline_latents=OFFLINE_LATENTS_FILE,
    log:
        f"{RESULTS}/logs/iter_{{it}}/train.log",
    benchmark:
        f"{RESULTS}/benchmarks/iter_{{it}}/train.tsv"
    threads: config["resources"]["threads"]
    resources:
        **job_resources(gpu=job_gpus.train_gpus(config)),
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/train.py"

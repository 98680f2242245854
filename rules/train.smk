# Training (LoRA, or the full UNet) on the iteration's pairs or advantages (by train.loss), from model(it-1).
# In-stage state lives in train/state/,
# which is not an output: Snakemake keeps it when the job dies, and the rerun resumes from it.


rule train:
    input:
        model=base_model_input,
        lora=previous_lora_input,
        extra=previous_extra_adapters_input,
        signal=train_signal_input,
        latents=f"{RESULTS}/iter_{{it}}/latents.safetensors",
        offline=offline_pairs_input,
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
        state_dir=train_state_dir,
        offline_pairs=offline_pairs_file,
        offline_latents=offline_latents_file,
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

# Training (LoRA, or the full UNet) on the iteration's pairs or advantages (by train.loss), from model(it-1).
# In-stage state lives in train/state/,
# which is not an output: Snakemake keeps it when the job dies, and the rerun resumes from it.


rule train:
    group: ITERATION_GROUP
    input:
        model=BASE_MODEL_INPUT,
        lora=previous_lora_input,
        extra=previous_extra_adapters_input,
        signal=TRAIN_SIGNAL,
        latents=f"{ITER}/{layout.LATENTS}",
        offline=OFFLINE_PAIRS_INPUT,
        preflight=preflight_input,
        guard=previous_guard_input,
    output:
        lora=f"{ITER}/{layout.TRAIN_DIR}/{TRAINED_FILE}",
        metrics=metrics_file("train"),
        **extra_adapter_files(f"{ITER}/{layout.TRAIN_DIR}"),
    params:
        cfg=stage_config(config, *TRAIN_SECTIONS),
        lora_dir=previous_lora_dir,
        out_dir=train_dir,
        state_dir=TRAIN_STATE_DIR,
        offline_pairs=OFFLINE_PAIRS_FILE,
        offline_latents=OFFLINE_LATENTS_FILE,
    log:
        RUN.log(ITER_NAME, "train"),
    benchmark:
        RUN.benchmark(ITER_NAME, "train")
    priority: LOOP_PRIORITY
    threads: config["resources"]["train_threads"] or config["resources"]["threads"]
    resources:
        **job_resources(config, gpu=job_gpus.train_gpus(config)),
    script:
        "../scripts/train.py"

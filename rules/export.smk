# Publish the trained LoRA as model(it), which iteration it+1 samples from.


rule export:
    group: ITERATION_GROUP
    localrule: LOCAL_UNLESS_GROUPED
    input:
        lora=f"{ITER}/{layout.TRAIN_DIR}/{TRAINED_FILE}",
        previous=previous_lora_input,
        **extra_adapter_files(f"{ITER}/{layout.TRAIN_DIR}"),
    output:
        lora=f"{ITER}/{layout.CHECKPOINT_DIR}/{CHECKPOINT_FILE}",
        metrics=metrics_file("export"),
        **extra_adapter_files(f"{ITER}/{layout.CHECKPOINT_DIR}"),
    params:
        cfg=export_config(config, EXTRA_ADAPTERS),
        trained_dir=train_dir,
        checkpoint_dir=checkpoint_dir_of,
        previous_dir=previous_lora_dir,
    log:
        RUN.log(ITER_NAME, "export"),
    benchmark:
        RUN.benchmark(ITER_NAME, "export")
    threads: 1
    resources:
        **job_resources(config, gpu=0),
    script:
        "../scripts/export.py"

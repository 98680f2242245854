# Rollouts: images_per_prompt samples for the iteration's prompts from model(it-1).
# With generate.shards > 1, generate_shard jobs each sample a run of whole batches and rule generate
# gathers them into the same files (equal byte for byte to an unsharded run's); see StageSharding in src/rewardloop/runtime/sharding.py.


rule:
    name: GENERATE_SHARDING.work_rule
    group: ITERATION_GROUP
    input:
        model=BASE_MODEL_INPUT,
        lora=rollout_lora_input,
        prompts=config["prompts"]["train"],
    output:
        samples=GENERATE_SHARDING.output(ITER, layout.SAMPLES),
        latents=GENERATE_SHARDING.output(ITER, layout.LATENTS),
        metrics=GENERATE_SHARDING.output(ITER, layout.SHARD_METRICS, whole=metrics_file("generate")),
    params:
        cfg=stage_config(config, "seed", "model", "prompts", "generate", "device", keep={"prompts": ("train",)}),
        lora_dir=rollout_lora_dir,
        record_sde=RECORD_SDE,
        **GENERATE_SHARDING.params(),
    log:
        RUN.log(ITER_NAME, GENERATE_SHARDING.job("generate")),
    benchmark:
        RUN.benchmark(ITER_NAME, GENERATE_SHARDING.job("generate"))
    priority: LOOP_PRIORITY
    threads: config["resources"]["threads"]
    resources:
        **job_resources(config),
    script:
        "../scripts/generate.py"


if GENERATE_SHARDING.sharded:

    rule generate:
        group: ITERATION_GROUP
        localrule: LOCAL_UNLESS_GROUPED
        input:
            samples=GENERATE_SHARDING.gathered(ITER, layout.SAMPLES),
            latents=GENERATE_SHARDING.gathered(ITER, layout.LATENTS),
            metrics=GENERATE_SHARDING.gathered(ITER, layout.SHARD_METRICS),
        output:
            samples=f"{ITER}/{layout.SAMPLES}",
            latents=f"{ITER}/{layout.LATENTS}",
            metrics=metrics_file("generate"),
        log:
            RUN.log(ITER_NAME, "generate"),
        benchmark:
            RUN.benchmark(ITER_NAME, "generate")
        threads: 1
        resources:
            **gather_resources(config),
        script:
            "../scripts/gather_samples.py"

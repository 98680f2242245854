# Rollouts: images_per_prompt samples for the iteration's prompts from model(it-1).
# With generate.shards > 1, generate_shard jobs each sample a run of whole batches and rule generate
# gathers them into the same files (equal byte for byte to an unsharded run's).

GENERATE_INPUT = dict(model=BASE_MODEL_INPUT, lora=rollout_lora_input, prompts=config["prompts"]["train"])
GENERATE_CFG = stage_config(config, "seed", "model", "prompts", "generate", "device", keep={"prompts": ("train",)})


if config["generate"]["shards"] == 1:

    rule generate:
        group: ITERATION_GROUP
        input:
            **GENERATE_INPUT,
        output:
            samples=f"{ITER}/{layout.SAMPLES}",
            latents=f"{ITER}/{layout.LATENTS}",
            metrics=metrics_file("generate"),
        params:
            cfg=GENERATE_CFG,
            lora_dir=rollout_lora_dir,
            record_sde=RECORD_SDE,
        log:
            RUN.log(ITER_NAME, "generate"),
        benchmark:
            RUN.benchmark(ITER_NAME, "generate")
        threads: config["resources"]["threads"]
        resources:
            **job_resources(),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/generate.py"

else:

    rule generate_shard:
        group: ITERATION_GROUP
        input:
            **GENERATE_INPUT,
        output:
            samples=f"{ITER}/{layout.shard_name('generate', '{shard}')}/{layout.SAMPLES}",
            latents=f"{ITER}/{layout.shard_name('generate', '{shard}')}/{layout.LATENTS}",
            metrics=f"{ITER}/{layout.shard_name('generate', '{shard}')}/{layout.SHARD_METRICS}",
        params:
            cfg=GENERATE_CFG,
            lora_dir=rollout_lora_dir,
            record_sde=RECORD_SDE,
            shard=shard_index,
            shards=config["generate"]["shards"],
        log:
            RUN.log(ITER_NAME, "generate_{shard}"),
        benchmark:
            RUN.benchmark(ITER_NAME, "generate_{shard}")
        threads: config["resources"]["threads"]
        resources:
            **job_resources(),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/generate.py"

    rule generate:
        group: ITERATION_GROUP
        localrule: LOCAL_UNLESS_GROUPED
        input:
            samples=shard_outputs("generate", layout.SAMPLES),
            latents=shard_outputs("generate", layout.LATENTS),
            metrics=shard_outputs("generate", layout.SHARD_METRICS),
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
            mem_mb=config["resources"]["mem_mb"],
            runtime=10,
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/gather_samples.py"

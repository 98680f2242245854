# Rollouts: images_per_prompt samples for the iteration's prompts from model(it-1).
# With generate.shards > 1, generate_shard jobs each sample a run of whole batches and rule generate
# gathers them into the same files (equal byte for byte to an unsharded run's).

GENERATE_INPUT = dict(model=BASE_MODEL_INPUT, lora=rollout_lora_input, prompts=config["prompts"]["train"])
GENERATE_CFG = stage_config(config, "seed", "model", "prompts", "generate", "device", keep={"prompts": ("train",)})


if config["generate"]["shards"] == 1:

    rule generate:
        input:
            **GENERATE_INPUT,
        output:
            samples=f"{RESULTS}/iter_{{it}}/samples.parquet",
            latents=f"{RESULTS}/iter_{{it}}/latents.safetensors",
            metrics=f"{RESULTS}/iter_{{it}}/metrics/generate.json",
        params:
            cfg=GENERATE_CFG,
            lora_dir=rollout_lora_dir,
            record_sde=RECORD_SDE,
        log:
            f"{RESULTS}/logs/iter_{{it}}/generate.log",
        benchmark:
            f"{RESULTS}/benchmarks/iter_{{it}}/generate.tsv"
        threads: config["resources"]["threads"]
        resources:
            **job_resources(),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/generate.py"

else:

    rule generate_shard:
        input:
            **GENERATE_INPUT,
        output:
            samples=f"{RESULTS}/iter_{{it}}/shards/generate_{{shard}}/samples.parquet",
            latents=f"{RESULTS}/iter_{{it}}/shards/generate_{{shard}}/latents.safetensors",
            metrics=f"{RESULTS}/iter_{{it}}/shards/generate_{{shard}}/metrics.json",
        params:
            cfg=GENERATE_CFG,
            lora_dir=rollout_lora_dir,
            record_sde=RECORD_SDE,
            shard=shard_index,
            shards=config["generate"]["shards"],
        log:
            f"{RESULTS}/logs/iter_{{it}}/generate_{{shard}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/iter_{{it}}/generate_{{shard}}.tsv"
        threads: config["resources"]["threads"]
        resources:
            **job_resources(),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/generate.py"

    rule generate:
        localrule: True
        input:
            samples=shard_outputs("generate", "samples.parquet"),
            latents=shard_outputs("generate", "latents.safetensors"),
            metrics=shard_outputs("generate", "metrics.json"),
        output:
            samples=f"{RESULTS}/iter_{{it}}/samples.parquet",
            latents=f"{RESULTS}/iter_{{it}}/latents.safetensors",
            metrics=f"{RESULTS}/iter_{{it}}/metrics/generate.json",
        log:
            f"{RESULTS}/logs/iter_{{it}}/generate.log",
        benchmark:
            f"{RESULTS}/benchmarks/iter_{{it}}/generate.tsv"
        threads: 1
        resources:
            mem_mb=config["resources"]["mem_mb"],
            runtime=10,
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/gather_samples.py"

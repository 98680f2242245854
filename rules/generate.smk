# Rollouts: images_per_prompt samples for the iteration's prompts from model(it-1).


rule generate:
    input:
        model=base_model_input,
        lora=previous_lora_input,
        prompts=config["prompts"]["train"],
    output:
        samples=f"{RESULTS}/iter_{{it}}/samples.parquet",
        latents=f"{RESULTS}/iter_{{it}}/latents.safetensors",
        metrics=f"{RESULTS}/iter_{{it}}/metrics/generate.json",
    params:
        cfg=stage_config(config, "seed", "model", "prompts", "generate", "device"),
        lora_dir=previous_lora_dir,
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

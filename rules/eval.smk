# Held-out evaluation of the base model and of every exported iteration. Nothing on the training
# path depends on it, so the next iteration never waits for it.

# What eval reads: the held-out prompts, and of generate only the sampler's guidance, size, batch,
# sampler and precision (not the rollouts' steps, eta, group size or SDE settings).
EVAL_CFG = stage_config(config, "model", "prompts", "generate", "eval", "rewards", "score", "device",
                        keep={"prompts": ("eval",),
                              "generate": ("guidance_scale", "resolution", "batch_size", "scheduler", "precision")})


rule eval_base:
    input:
        model=base_model_input,
        prompts=config["prompts"]["eval"],
    output:
        table=f"{RESULTS}/base/eval.parquet",
        metrics=f"{RESULTS}/base/metrics/eval.json",
    params:
        cfg=EVAL_CFG,
        iteration=None,
        lora_dir=None,
    log:
        f"{RESULTS}/logs/base/eval.log",
    benchmark:
        f"{RESULTS}/benchmarks/base/eval.tsv"
    threads: config["resources"]["threads"]
    resources:
        **job_resources(),
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/evaluate.py"


rule eval:
    input:
        model=base_model_input,
        prompts=config["prompts"]["eval"],
        lora=f"{RESULTS}/iter_{{it}}/checkpoint/{CHECKPOINT_FILE}",
    output:
        table=f"{RESULTS}/iter_{{it}}/eval.parquet",
        metrics=f"{RESULTS}/iter_{{it}}/metrics/eval.json",
    params:
        cfg=EVAL_CFG,
        iteration=iteration_of,
        lora_dir=checkpoint_dir_of,
    log:
        f"{RESULTS}/logs/iter_{{it}}/eval.log",
    benchmark:
        f"{RESULTS}/benchmarks/iter_{{it}}/eval.tsv"
    threads: config["resources"]["threads"]
    resources:
        **job_resources(),
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/evaluate.py"

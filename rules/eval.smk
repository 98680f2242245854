# Held-out evaluation of every exported iteration (the base model's is in rules/base.smk). Nothing on
# the training path depends on it, so the next iteration never waits for it.

rule eval:
    input:
        model=BASE_MODEL_INPUT,
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


# eval.also_at_guidance: the same eval at a further CFG scale (iter_XXX/eval_cfg1.parquet for 1.0), so
# that objectives sampling at different guidance are compared at each (configs/tiny_sd3_compare.yaml).
if GUIDANCE_EVAL_CFG:

    rule eval_at_guidance:
        input:
            model=BASE_MODEL_INPUT,
            prompts=config["prompts"]["eval"],
            lora=f"{RESULTS}/iter_{{it}}/checkpoint/{CHECKPOINT_FILE}",
        output:
            table=f"{RESULTS}/iter_{{it}}/{{guidance_eval}}.parquet",
            metrics=f"{RESULTS}/iter_{{it}}/metrics/{{guidance_eval}}.json",
        wildcard_constraints:
            guidance_eval="|".join(GUIDANCE_EVAL_CFG).replace(".", r"\."),
        params:
            cfg=guidance_eval_cfg,
            iteration=iteration_of,
            lora_dir=checkpoint_dir_of,
            name="{guidance_eval}",
        log:
            f"{RESULTS}/logs/iter_{{it}}/{{guidance_eval}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/iter_{{it}}/{{guidance_eval}}.tsv"
        threads: config["resources"]["threads"]
        resources:
            **job_resources(),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/evaluate.py"

# Held-out evaluation of every exported iteration (the base model's is in rules/base.smk). Nothing on
# the training path depends on it, so the next iteration never waits for it. The same job then says what
# the folder's images look like, for the guard and the report: their health statistics (health.parquet,
# rollouts and eval images) and the image grids; cheap, they ride along rather than cost a job each.

rule eval:
    group: ITERATION_GROUP
    input:
        model=BASE_MODEL_INPUT,
        prompts=config["prompts"]["eval"],
        lora=f"{ITER}/{layout.CHECKPOINT_DIR}/{CHECKPOINT_FILE}",
        samples=f"{ITER}/{layout.SAMPLES}",  # the rollouts: their health and grid are written here too
        scores=f"{ITER}/{layout.SCORES}",
    output:
        table=f"{ITER}/{layout.EVAL_TABLE}",
        metrics=metrics_file("eval"),
        health=f"{ITER}/{layout.HEALTH}",
        grid=report(
            f"{ITER}/{layout.GRID}",
            caption="../report/grid.rst",
            category="iteration {it}",
            subcategory="images",
            labels={"iteration": "{it}", "images": "rollouts"},
        ),
        eval_grid=report(
            f"{ITER}/{layout.EVAL_GRID}",
            caption="../report/eval_grid.rst",
            category="iteration {it}",
            subcategory="images",
            labels={"iteration": "{it}", "images": "eval"},
        ),
    params:
        cfg=EVAL_CFG,
        iteration=iteration_of,
        lora_dir=checkpoint_dir_of,
        label=iteration_label,
    log:
        RUN.log(ITER_NAME, "eval"),
    benchmark:
        RUN.benchmark(ITER_NAME, "eval")
    threads: config["resources"]["threads"]
    resources:
        **job_resources(config),
    script:
        "../scripts/evaluate.py"


# eval.also_at_guidance: the same eval at a further CFG scale (iter_XXX/eval_cfg1.parquet for 1.0), so
# that objectives sampling at different guidance are compared at each (configs/tiny_sd3_compare.yaml).
if GUIDANCE_EVAL_CFG:

    rule eval_at_guidance:
        group: ITERATION_GROUP
        input:
            model=BASE_MODEL_INPUT,
            prompts=config["prompts"]["eval"],
            lora=f"{ITER}/{layout.CHECKPOINT_DIR}/{CHECKPOINT_FILE}",
        output:
            table=f"{ITER}/{layout.guidance_table('{guidance_eval}')}",
            metrics=metrics_file("{guidance_eval}"),
        params:
            cfg=guidance_eval_cfg,
            iteration=iteration_of,
            lora_dir=checkpoint_dir_of,
            name="{guidance_eval}",
        log:
            RUN.log(ITER_NAME, "{guidance_eval}"),
        benchmark:
            RUN.benchmark(ITER_NAME, "{guidance_eval}")
        threads: config["resources"]["threads"]
        resources:
            **job_resources(config),
        script:
            "../scripts/evaluate.py"

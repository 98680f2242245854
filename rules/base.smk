# The base model's held-out eval, with its images' health and grid: model(-1), what every iteration is
# compared with.
# A fan-out (rules/experiments.smk) makes them once, in results/base/; each of its runs copies them in.

if SHARED_RESULTS:
    # A fan-out's run: the base model's eval is the fan-out's (results/base/), copied in, not redone.

    rule share_base:
        localrule: True
        input:
            table=f"{SHARED_RUN.base}/{layout.EVAL_TABLE}",
            metrics=metrics_file("eval", SHARED_RUN.base),
            eval_grid=f"{SHARED_RUN.base}/{layout.EVAL_GRID}",
            health=f"{SHARED_RUN.base}/{layout.HEALTH}",
        output:
            table=f"{BASE_DIR}/{layout.EVAL_TABLE}",
            metrics=metrics_file("eval", BASE_DIR),
            eval_grid=f"{BASE_DIR}/{layout.EVAL_GRID}",
            health=f"{BASE_DIR}/{layout.HEALTH}",
        log:
            RUN.log(layout.BASE, "share_base"),
        benchmark:
            RUN.benchmark(layout.BASE, "share_base")
        threads: 1
        resources:
            **LIGHT_JOB,
        script:
            "../scripts/share_base.py"

    # Its evals at eval.also_at_guidance's scales, a job each: adding a scale re-copies nothing else.
    rule share_base_at_guidance:
        localrule: True
        input:
            table=f"{SHARED_RUN.base}/{layout.guidance_table('{guidance_eval}')}",
            metrics=metrics_file("{guidance_eval}", SHARED_RUN.base),
        output:
            table=f"{BASE_DIR}/{layout.guidance_table('{guidance_eval}')}",
            metrics=metrics_file("{guidance_eval}", BASE_DIR),
        log:
            RUN.log(layout.BASE, "share_base_{guidance_eval}"),
        benchmark:
            RUN.benchmark(layout.BASE, "share_base_{guidance_eval}")
        threads: 1
        resources:
            **LIGHT_JOB,
        script:
            "../scripts/share_base.py"

else:

    rule eval_base:
        input:
            model=BASE_MODEL_INPUT,
            prompts=config["prompts"]["eval"],
        output:
            table=f"{BASE_DIR}/{layout.EVAL_TABLE}",
            metrics=metrics_file("eval", BASE_DIR),
            health=f"{BASE_DIR}/{layout.HEALTH}",
            eval_grid=report(
                f"{BASE_DIR}/{layout.EVAL_GRID}",
                caption="../report/eval_grid.rst",
                category="base model",
                labels={"iteration": layout.BASE, "images": "eval"},
            ),
        params:
            cfg=EVAL_CFG,
            iteration=None,
            lora_dir=None,
            label="base model",
        log:
            RUN.log(layout.BASE, "eval"),
        benchmark:
            RUN.benchmark(layout.BASE, "eval")
        threads: config["resources"]["threads"]
        resources:
            **job_resources(config),
        script:
            "../scripts/evaluate.py"

    if GUIDANCE_EVAL_CFG:

        rule eval_base_at_guidance:
            input:
                model=BASE_MODEL_INPUT,
                prompts=config["prompts"]["eval"],
            output:
                table=f"{BASE_DIR}/{layout.guidance_table('{guidance_eval}')}",
                metrics=metrics_file("{guidance_eval}", BASE_DIR),
            params:
                cfg=guidance_eval_cfg,
                iteration=None,
                lora_dir=None,
                name="{guidance_eval}",
            log:
                RUN.log(layout.BASE, "{guidance_eval}"),
            benchmark:
                RUN.benchmark(layout.BASE, "{guidance_eval}")
            threads: config["resources"]["threads"]
            resources:
                **job_resources(config),
            script:
                "../scripts/evaluate.py"


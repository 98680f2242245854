# The base model's held-out eval and its image grid: model(-1), what every iteration is compared with.
# A fan-out (rules/experiments.smk) makes them once, in results/base/; each of its runs copies them in.

if SHARED_RESULTS:
    # A fan-out's run: the base model's eval is the fan-out's (results/base/), copied in, not redone.

    rule share_base:
        localrule: True
        input:
            table=f"{SHARED_RESULTS}/base/eval.parquet",
            metrics=f"{SHARED_RESULTS}/base/metrics/eval.json",
            eval_grid=f"{SHARED_RESULTS}/base/eval_grid.png",
        output:
            table=f"{RESULTS}/base/eval.parquet",
            metrics=f"{RESULTS}/base/metrics/eval.json",
            eval_grid=f"{RESULTS}/base/eval_grid.png",
        log:
            f"{RESULTS}/logs/base/share_base.log",
        benchmark:
            f"{RESULTS}/benchmarks/base/share_base.tsv"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=5,
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/share_base.py"

    # Its evals at eval.also_at_guidance's scales, a job each: adding a scale re-copies nothing else.
    rule share_base_at_guidance:
        localrule: True
        input:
            table=f"{SHARED_RESULTS}/base/{{guidance_eval}}.parquet",
            metrics=f"{SHARED_RESULTS}/base/metrics/{{guidance_eval}}.json",
        output:
            table=f"{RESULTS}/base/{{guidance_eval}}.parquet",
            metrics=f"{RESULTS}/base/metrics/{{guidance_eval}}.json",
        wildcard_constraints:
            guidance_eval=r"eval_cfg[0-9.]+",
        log:
            f"{RESULTS}/logs/base/share_base_{{guidance_eval}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/base/share_base_{{guidance_eval}}.tsv"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=5,
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/share_base.py"

else:

    rule eval_base:
        input:
            model=BASE_MODEL_INPUT,
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

    if GUIDANCE_EVAL_CFG:

        rule eval_base_at_guidance:
            input:
                model=BASE_MODEL_INPUT,
                prompts=config["prompts"]["eval"],
            output:
                table=f"{RESULTS}/base/{{guidance_eval}}.parquet",
                metrics=f"{RESULTS}/base/metrics/{{guidance_eval}}.json",
            wildcard_constraints:
                guidance_eval="|".join(GUIDANCE_EVAL_CFG).replace(".", r"\."),
            params:
                cfg=guidance_eval_cfg,
                iteration=None,
                lora_dir=None,
                name="{guidance_eval}",
            log:
                f"{RESULTS}/logs/base/{{guidance_eval}}.log",
            benchmark:
                f"{RESULTS}/benchmarks/base/{{guidance_eval}}.tsv"
            threads: config["resources"]["threads"]
            resources:
                **job_resources(),
            conda:
                "../envs/rewardloop.yaml"
            script:
                "../scripts/evaluate.py"


# A fan-out's runs copy the fan-out's base grid in (rule share_base).
if not SHARED_RESULTS:

    rule grid_base:
        localrule: True
        input:
            eval=f"{RESULTS}/base/eval.parquet",
        output:
            eval_grid=report(
                f"{RESULTS}/base/eval_grid.png",
                caption="../report/eval_grid.rst",
                category="base model",
                labels={"iteration": "base", "images": "eval"},
            ),
        params:
            label="base model",
        log:
            f"{RESULTS}/logs/base/grids.log",
        benchmark:
            f"{RESULTS}/benchmarks/base/grids.tsv"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/grids.py"

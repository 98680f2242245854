# Figures and files for `snakemake --report report.html`: reward/training curves, image grids per
# iteration, the validated config. Cheap, so they run on the submitting host.


rule grids:
    localrule: True
    input:
        samples=f"{RESULTS}/iter_{{it}}/samples.parquet",
        scores=f"{RESULTS}/iter_{{it}}/scores.parquet",
        eval=f"{RESULTS}/iter_{{it}}/eval.parquet",
    output:
        grid=report(
            f"{RESULTS}/iter_{{it}}/grid.png",
            caption="../report/grid.rst",
            category="iteration {it}",
            subcategory="images",
            labels={"iteration": "{it}", "images": "rollouts"},
        ),
        eval_grid=report(
            f"{RESULTS}/iter_{{it}}/eval_grid.png",
            caption="../report/eval_grid.rst",
            category="iteration {it}",
            subcategory="images",
            labels={"iteration": "{it}", "images": "eval"},
        ),
    params:
        label=iteration_label,
    log:
        f"{RESULTS}/logs/iter_{{it}}/grids.log",
    benchmark:
        f"{RESULTS}/benchmarks/iter_{{it}}/grids.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/grids.py"


rule plot_curves:
    localrule: True
    input:
        base_eval=f"{RESULTS}/base/metrics/eval.json",
        scores=all_iterations_metrics("score"),
        evals=all_iterations_metrics("eval"),
        trains=all_iterations_metrics("train"),
    output:
        curves=report(
            f"{REPORT_DIR}/curves.png",
            caption="../report/curves.rst",
            category="curves",
            labels={"figure": "reward and training curves"},
        ),
    params:
        steps_per_iteration=config["train"]["steps"],
    log:
        f"{RESULTS}/logs/report/plot_curves.log",
    benchmark:
        f"{RESULTS}/benchmarks/report/plot_curves.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/plot_curves.py"


rule report_config:
    localrule: True
    output:
        config=report(
            f"{REPORT_DIR}/config.yaml",
            caption="../report/config.rst",
            category="config",
            labels={"file": "config.yaml"},
        ),
    params:
        cfg=config,
    log:
        f"{RESULTS}/logs/report/config.log",
    benchmark:
        f"{RESULTS}/benchmarks/report/config.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/report_config.py"

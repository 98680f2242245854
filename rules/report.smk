# Figures and files for `snakemake --report report.html`: reward/training curves, the validated config,
# and the benchmark table once `rewardloop benchmark` ran (the image grids are the eval jobs' outputs,
# rules/eval.smk). Cheap, so they run on the submitting host.


rule plot_curves:
    localrule: True
    input:
        base_eval=metrics_file("eval", BASE_DIR),
        scores=all_iterations_metrics("score"),
        evals=all_iterations_metrics("eval"),
        trains=all_iterations_metrics("train"),
    output:
        curves=report(
            RUN.report(layout.CURVES),
            caption="../report/curves.rst",
            category="curves",
            labels={"figure": "reward and training curves"},
        ),
    params:
        steps_per_iteration=config["train"]["steps"],
    log:
        RUN.log(layout.REPORT, "plot_curves"),
    benchmark:
        RUN.benchmark(layout.REPORT, "plot_curves")
    threads: 1
    resources:
        **TABLE_JOB,
    script:
        "../scripts/plot_curves.py"


rule report_config:
    localrule: True
    output:
        config=report(
            RUN.report(layout.RUN_CONFIG),
            caption="../report/config.rst",
            category="config",
            labels={"file": layout.RUN_CONFIG},
        ),
    params:
        cfg=config,
    log:
        RUN.log(layout.REPORT, "config"),
    benchmark:
        RUN.benchmark(layout.REPORT, "config")
    threads: 1
    resources:
        **LIGHT_JOB,
    script:
        "../scripts/report_config.py"


# The run's benchmark table (rewardloop summary --benchmarks as CSV), planned only when `rewardloop benchmark`
# left per-image scores under base/ or iter_XXX/benchmark/; a further benchmark or checkpoint reruns it.
rule benchmark_table:
    localrule: True
    input:
        BENCHMARK_TABLES,
    output:
        table=report(
            f"{REPORT_DIR}/{layout.BENCHMARK_REPORT}",
            caption="../report/benchmarks.rst",
            category="benchmarks",
            labels={"file": layout.BENCHMARK_REPORT},
        ),
    params:
        results=lambda wildcards: RESULTS,  # a folder, not a file prefix (as --lint would read a plain string)
    log:
        RUN.log(layout.REPORT, "benchmark_table"),
    benchmark:
        RUN.benchmark(layout.REPORT, "benchmark_table")
    threads: 1
    resources:
        **LIGHT_JOB,
    script:
        "../scripts/benchmark_table.py"

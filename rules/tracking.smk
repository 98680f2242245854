# MLflow tracking (tracking.enabled): one parent run per results folder, one child run per iteration.
# The stages know nothing of it; these local rules log what the stages wrote. A tracking failure never
# fails a job: it ends up as status "failed" in the marker (run.json / tracking.json); without a parent
# run the later jobs write "skipped"; the Snakefile's onsuccess/onerror print one line naming the marker.
# The tracking URI: $MLFLOW_TRACKING_URI, else sqlite:///results/mlflow.db. `envvars:` makes Snakemake
# refuse to start when a listed variable is unset, so it lists the variable only when it is set
# (remote executors then pass it on); local jobs read it from their environment anyway.
# No rule carries an absolute path (params are part of a job's identity): a results folder moved
# elsewhere, with .snakemake/, has nothing to rerun; tracking_run finds the workflow's git repository
# from its script's folder.

import os

TRACKING_ENVVARS = [name for name in ("MLFLOW_TRACKING_URI",) if name in os.environ]


envvars:
    *TRACKING_ENVVARS,


rule tracking_run:
    localrule: True
    output:
        run=TRACKING_RUN,
    params:
        results=SHARED_RESULTS or RESULTS,  # the folder whose run lock dates the workflow run's start
    log:
        f"{RESULTS}/logs/tracking/run.log",
    benchmark:
        f"{RESULTS}/benchmarks/tracking/run.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/track_run.py"


rule track_iteration:
    localrule: True
    input:
        run=TRACKING_RUN,
        metrics=iteration_metrics,
        samples=f"{RESULTS}/iter_{{it}}/samples.parquet",
        scores=f"{RESULTS}/iter_{{it}}/scores.parquet",
        eval=f"{RESULTS}/iter_{{it}}/eval.parquet",
        grid=f"{RESULTS}/iter_{{it}}/grid.png",
        eval_grid=f"{RESULTS}/iter_{{it}}/eval_grid.png",
    output:
        marker=f"{RESULTS}/iter_{{it}}/tracking.json",
    params:
        iteration=iteration_of,
        steps_per_iteration=None,  # the global step's stride: the optimizer steps metrics/train.json says were taken
        benchmarks=iteration_benchmarks,
    log:
        f"{RESULTS}/logs/iter_{{it}}/tracking.log",
    benchmark:
        f"{RESULTS}/benchmarks/iter_{{it}}/tracking.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/track_iteration.py"


rule track_base:
    localrule: True
    input:
        run=TRACKING_RUN,
        metrics=f"{RESULTS}/base/metrics/eval.json",
        guidance_metrics=[f"{RESULTS}/base/metrics/{name}.json" for name in GUIDANCE_EVAL_CFG],
        eval=f"{RESULTS}/base/eval.parquet",
        grid=f"{RESULTS}/base/eval_grid.png",
    output:
        marker=f"{RESULTS}/base/tracking.json",
    params:
        benchmark=base_benchmark,
    log:
        f"{RESULTS}/logs/base/tracking.log",
    benchmark:
        f"{RESULTS}/benchmarks/base/tracking.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../envs/rewardloop.yaml"
    script:
        "../scripts/track_base.py"

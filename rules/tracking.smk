# MLflow tracking (tracking.enabled): one parent run per results folder, one child run per iteration.
# The stages know nothing of it; these local rules log what the stages and the monitors wrote, one job
# per folder (a guard rerun, a gold reward added, reruns it: MLflow keeps one copy of a value logged
# twice with the same step and timestamp, a timestamp being its file's mtime). A tracking failure never
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
        # the folder whose run lock dates the workflow run's start: the shared one of a fan-out, which is
        # not this rule's output folder (a function: snakemake --lint takes a plain string for a path prefix)
        results=lambda wildcards: SHARED_RESULTS or RESULTS,
    log:
        RUN.log("tracking", "run"),
    benchmark:
        RUN.benchmark("tracking", "run")
    threads: 1
    resources:
        **TABLE_JOB,
    script:
        "../scripts/track_run.py"


rule track_iteration:
    localrule: True
    input:
        run=TRACKING_RUN,
        metrics=iteration_metrics,
        samples=f"{ITER}/{layout.SAMPLES}",
        scores=f"{ITER}/{layout.SCORES}",
        eval=f"{ITER}/{layout.EVAL_TABLE}",
        grid=f"{ITER}/{layout.GRID}",
        eval_grid=f"{ITER}/{layout.EVAL_GRID}",
        health=f"{ITER}/{layout.HEALTH}",
        gold=list(gold_files(ITER_NAME).values()),
        verdict=f"{ITER}/{layout.GUARD_VERDICT}" if GUARD["enabled"] else [],
    output:
        marker=f"{ITER}/{layout.TRACKING_MARKER}",
    params:
        iteration=iteration_of,
        steps_per_iteration=None,  # the global step's stride: the optimizer steps metrics/train.json says were taken
        benchmarks=iteration_benchmarks,
    log:
        RUN.log(ITER_NAME, "tracking"),
    benchmark:
        RUN.benchmark(ITER_NAME, "tracking")
    threads: 1
    resources:
        **TABLE_JOB,
    script:
        "../scripts/track_iteration.py"


rule track_base:
    localrule: True
    input:
        run=TRACKING_RUN,
        metrics=metrics_file("eval", BASE_DIR),
        guidance_metrics=[metrics_file(name, BASE_DIR) for name in GUIDANCE_EVAL_CFG],
        eval=f"{BASE_DIR}/{layout.EVAL_TABLE}",
        grid=f"{BASE_DIR}/{layout.EVAL_GRID}",
        health=f"{BASE_DIR}/{layout.HEALTH}",
        gold=list(gold_files(layout.BASE).values()),
    output:
        marker=f"{BASE_DIR}/{layout.TRACKING_MARKER}",
    params:
        benchmark=base_benchmark,
    log:
        RUN.log(layout.BASE, "tracking"),
    benchmark:
        RUN.benchmark(layout.BASE, "tracking")
    threads: 1
    resources:
        **TABLE_JOB,
    script:
        "../scripts/track_base.py"

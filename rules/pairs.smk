# Preference pairs per prompt group (cheap: runs on the submitting host).


rule pairs:
    group: ITERATION_GROUP
    localrule: LOCAL_UNLESS_GROUPED
    input:
        scores=f"{ITER}/{layout.SCORES}",
    output:
        pairs=f"{ITER}/{layout.signal_table('pairs')}",
        metrics=metrics_file("pairs"),
    params:
        cfg=stage_config(config, "pairs"),
    log:
        RUN.log(ITER_NAME, "pairs"),
    benchmark:
        RUN.benchmark(ITER_NAME, "pairs")
    threads: 1
    resources:
        **TABLE_JOB,
    script:
        "../scripts/pairs.py"

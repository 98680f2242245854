# Group advantages, the signal of the objectives trained on them (grpo, nft, awm; cheap: runs on the submitting host).


rule advantages:
    group: ITERATION_GROUP
    localrule: LOCAL_UNLESS_GROUPED
    input:
        scores=f"{ITER}/{layout.SCORES}",
    output:
        advantages=f"{ITER}/{layout.signal_table('advantages')}",
        metrics=metrics_file("advantages"),
    params:
        cfg=stage_config(config, "advantages"),
        keep_tied_groups=OBJECTIVE.keeps_tied_groups,
    log:
        RUN.log(ITER_NAME, "advantages"),
    benchmark:
        RUN.benchmark(ITER_NAME, "advantages")
    threads: 1
    resources:
        **TABLE_JOB,
    script:
        "../scripts/advantages.py"

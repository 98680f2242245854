# Preflight gate: a check of iteration 0's rollouts against the training code before iteration 0
# trains (src/rewardloop/stages/preflight.py): GRPO's importance ratio and noise-level-0 sampler, NFT's
# and AWM's rollout guidance, DPO's starting loss. Rule preflight measures (with train's sections in
# its params), rule preflight_gate holds the figures against the tolerances (the only job whose params
# hold them). Rule train of iteration 0 takes both files as input (preflight_input in rules/common.smk),
# so a failed check stops the run before it trains and keeps the rollouts.

if PREFLIGHT_ENABLED:

    rule preflight:
        group: PREFLIGHT_GROUP
        input:
            model=BASE_MODEL_INPUT,
            lora=_at_iteration_0(previous_lora_input),
            rollout_lora=_at_iteration_0(rollout_lora_input),
            samples=f"{iter_dir(0)}/{layout.SAMPLES}",
            signal=f"{iter_dir(0)}/{layout.signal_table(SIGNAL)}",
            latents=f"{iter_dir(0)}/{layout.LATENTS}",
        output:
            figures=PREFLIGHT_FIGURES,
        params:
            cfg=stage_config(config, *TRAIN_SECTIONS, "generate", "preflight", keep={"preflight": ("rollouts",)}),
            lora_dir=_at_iteration_0(previous_lora_dir),
            rollout_lora_dir=_at_iteration_0(rollout_lora_dir),
        log:
            RUN.log(layout.iteration_name(0), "preflight"),
        benchmark:
            RUN.benchmark(layout.iteration_name(0), "preflight")
        threads: config["resources"]["threads"]
        resources:
            **job_resources(config),
        script:
            "../scripts/preflight.py"

    rule preflight_gate:
        group: PREFLIGHT_GROUP
        localrule: LOCAL_UNLESS_GROUPED
        input:
            figures=PREFLIGHT_FIGURES,
        output:
            report=PREFLIGHT_REPORT,
        params:
            tolerances=config["preflight"],
        log:
            RUN.log(layout.iteration_name(0), "preflight_gate"),
        benchmark:
            RUN.benchmark(layout.iteration_name(0), "preflight_gate")
        threads: 1
        resources:
            mem_mb=config["resources"]["mem_mb"],
            runtime=10,
        script:
            "../scripts/preflight_gate.py"

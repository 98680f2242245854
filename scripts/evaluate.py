"""Snakemake entry point of rules eval, eval_base, eval_at_guidance and eval_base_at_guidance.

Rules eval and eval_base then say what the folder's images look like (they have a health output):
the image-health statistics the guard compares (rollouts and eval images) and the report's grids."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import evaluate

    evaluate.run(
        snakemake.params.cfg,
        snakemake.params.iteration,
        snakemake.params.lora_dir,
        snakemake.output.table,
        snakemake.output.metrics,
        threads=snakemake.threads,
        name=snakemake.params.get("name", "eval"),
    )
    if "health" in snakemake.output.keys():
        from rewardloop import results_layout as layout
        from rewardloop.reports.grids import load_scored, write_grid
        from rewardloop.stages import health

        rollouts = "samples" in snakemake.input.keys()
        tables = {"rollout": snakemake.input.samples} if rollouts else {}
        iteration = snakemake.params.iteration
        health.run({**tables, "eval": snakemake.output.table},
                   layout.BASE_ITERATION if iteration is None else iteration, snakemake.output.health)
        label = snakemake.params.label
        if rollouts:
            rollout = load_scored(snakemake.input.samples, snakemake.input.scores)
            write_grid(rollout, f"{label}: rollouts (reward)", snakemake.output.grid)
        write_grid(load_scored(snakemake.output.table), f"{label}: eval (reward)", snakemake.output.eval_grid)

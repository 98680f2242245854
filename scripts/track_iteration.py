"""Snakemake entry point of rule track_iteration: log one iteration and its monitors into its MLflow child run."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop import tracking

    tracking.track_iteration(
        snakemake.input.run,
        snakemake.params.iteration,
        tracking.iter_names(snakemake.input.metrics),
        {"samples": snakemake.input.samples, "scores": snakemake.input.scores, "eval": snakemake.input.eval},
        tracking.iteration_grids(snakemake.input.grid, snakemake.input.eval_grid),
        snakemake.params.benchmarks,
        snakemake.params.steps_per_iteration,
        snakemake.output.marker,
        monitors=tracking.Monitors(snakemake.input.health, tuple(snakemake.input.gold),
                                   snakemake.input.get("verdict") or None),
    )

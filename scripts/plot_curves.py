"""Snakemake entry point of rule plot_curves: reward and training curves over all iterations."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.reports.summary import plot_curves

    plot_curves(
        snakemake.input.base_eval,
        list(snakemake.input.scores),
        list(snakemake.input.evals),
        list(snakemake.input.trains),
        snakemake.params.steps_per_iteration,
        snakemake.output.curves,
    )

"""Snakemake entry point of rule plot_health: the report's image-health and gold-reward figure."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.monitors.plot import plot_health

    plot_health(snakemake.params.results, snakemake.output.figure)

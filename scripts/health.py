"""Snakemake entry point of rule health: image-health statistics of one folder's images."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import health
    from rewardloop.stages.rescore import SOURCES

    health.run(
        {source: snakemake.input[source] for source in SOURCES if source in snakemake.input.keys()},
        snakemake.params.iteration,
        snakemake.output.health,
    )

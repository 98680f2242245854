"""Snakemake entry point of rule rescore: one folder's archived images scored with one gold reward."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import rescore

    rescore.run(
        snakemake.params.cfg,
        {source: snakemake.input[source] for source in rescore.SOURCES if source in snakemake.input.keys()},
        snakemake.params.iteration,
        snakemake.output.table,
        snakemake.output.metrics,
    )

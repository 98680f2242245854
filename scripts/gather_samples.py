"""Snakemake entry point of rule generate when generate.shards > 1 (gathers the shards)."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake, uses_gpu=False):  # noqa: F821
    from rewardloop.stages import gather

    gather.samples(
        snakemake.input.samples,
        snakemake.input.latents,
        snakemake.input.metrics,
        snakemake.output.samples,
        snakemake.output.latents,
        snakemake.output.metrics,
    )

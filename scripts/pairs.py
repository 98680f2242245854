"""Snakemake entry point of rule pairs."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import pairs

    pairs.run(snakemake.params.cfg, snakemake.input.scores, snakemake.output.pairs, snakemake.output.metrics)

"""Snakemake entry point of rule advantages."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import advantages

    advantages.run(snakemake.params.cfg, snakemake.input.scores, snakemake.output.advantages,
                   snakemake.output.metrics, keep_tied_groups=snakemake.params.keep_tied_groups)

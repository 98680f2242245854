"""Snakemake entry point of rule score when score.shards > 1 (gathers the shards)."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake, uses_gpu=False):  # noqa: F821
    from rewardloop.stages import gather

    gather.scores(snakemake.input.scores, snakemake.input.metrics, snakemake.output.scores, snakemake.output.metrics)

"""Snakemake entry point of rule rescore when score.shards > 1 (gathers the rescore_shard jobs)."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake, uses_gpu=False):  # noqa: F821
    from rewardloop.stages import rescore

    rescore.gather(snakemake.params.cfg, snakemake.input.tables, snakemake.input.metrics,
                   snakemake.output.table, snakemake.output.metrics)

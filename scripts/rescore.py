"""Snakemake entry point of rules rescore and rescore_shard: one folder's archived images (or one run of
their batches, with score.shards > 1) scored with one gold reward."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import rescore

    rescore.run(
        snakemake.params.cfg,
        {source: snakemake.input[source] for source in rescore.SOURCES if source in snakemake.input.keys()},
        snakemake.params.iteration,
        snakemake.output.table,
        snakemake.output.metrics,
        shard=snakemake.params.get("shard", 0),
        shards=snakemake.params.get("shards", 1),
    )

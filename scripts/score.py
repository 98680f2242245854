"""Snakemake entry point of rule score."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import score

    score.run(
        snakemake.params.cfg,
        snakemake.input.samples,
        snakemake.output.scores,
        snakemake.output.metrics,
        # rule score_shard (score.shards > 1); rule score has neither param
        shard=int(getattr(snakemake.params, "shard", 0)),
        shards=int(getattr(snakemake.params, "shards", 1)),
    )

"""Snakemake entry point of rule generate."""
from rewardloop.runtime.snakemake_job import iteration, job

with job(snakemake):  # noqa: F821  (snakemake is injected by the script directive)
    from rewardloop.stages import generate

    generate.run(
        snakemake.params.cfg,
        iteration(snakemake),
        snakemake.params.lora_dir,
        snakemake.output.samples,
        snakemake.output.latents,
        snakemake.output.metrics,
        threads=snakemake.threads,
        # rule generate_shard (generate.shards > 1); rule generate has neither param
        shard=int(getattr(snakemake.params, "shard", 0)),
        shards=int(getattr(snakemake.params, "shards", 1)),
        record_sde=snakemake.params.record_sde,
    )

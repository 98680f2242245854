"""Snakemake entry point of rule train."""
from rewardloop.snakemake_job import iteration, job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import train

    train.run(
        snakemake.params.cfg,
        iteration(snakemake),
        snakemake.input.pairs,
        snakemake.input.latents,
        snakemake.params.lora_dir,
        snakemake.params.out_dir,
        snakemake.params.state_dir,
        snakemake.output.metrics,
        threads=snakemake.threads,
        offline_pairs_path=snakemake.params.offline_pairs,
        offline_latents_path=snakemake.params.offline_latents,
    )

"""Snakemake entry point of rule train."""
from rewardloop.snakemake_job import iteration, job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import train

    train.run(
        snakemake.params.cfg,
        iteration(snakemake),
        snakemake.input.signal,
        snakemake.input.latents,
        snakemake.params.lora_dir,
        snakemake.params.out_dir,
        snakemake.params.state_dir,
        snakemake.output.metrics,
        threads=snakemake.threads,
    )

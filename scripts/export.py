"""Snakemake entry point of rule export."""
from rewardloop.runtime.snakemake_job import iteration, job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import export

    export.run(
        snakemake.params.cfg,
        iteration(snakemake),
        snakemake.params.trained_dir,
        snakemake.params.checkpoint_dir,
        snakemake.output.metrics,
        previous_dir=snakemake.params.previous_dir,
    )

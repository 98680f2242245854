"""Snakemake entry point of rule track_monitors: one folder's health, gold rewards and guard in MLflow."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop import tracking

    tracking.track_monitors(
        snakemake.input.run,
        snakemake.params.iteration,
        snakemake.input.health,
        list(snakemake.input.gold),
        snakemake.input.get("verdict"),
        snakemake.output.marker,
    )

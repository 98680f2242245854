"""Snakemake entry point of rule track_base: the base model's eval and monitors into the MLflow parent run (step -1)."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop import tracking

    tracking.track_base(snakemake.input.run, snakemake.input.metrics, snakemake.input.eval, snakemake.input.grid,
                        snakemake.params.benchmark, snakemake.output.marker,
                        guidance_metrics=tracking.iter_names(snakemake.input.guidance_metrics),
                        monitors=tracking.Monitors(snakemake.input.health, tuple(snakemake.input.gold)))

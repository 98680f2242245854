"""Snakemake entry point of rule tracking_run: one MLflow parent run per results folder."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop import tracking

    # The full config comes from snakemake.config, not params: a config change must not make a new parent run.
    tracking.start_parent_run(snakemake.config, snakemake.output.run, repo=snakemake.params.repo)

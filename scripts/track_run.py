"""Snakemake entry point of rule tracking_run: one MLflow parent run per results folder."""
from pathlib import Path

from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop import tracking
    from rewardloop.runtime import runlock

    # The full config comes from snakemake.config, not params: a config change must not make a new parent run.
    # The git commit: of the repository holding this script (scriptdir: its folder, not the job's copy).
    # The parent run starts with the workflow run, when it took the results folder's lock.
    tracking.start_parent_run(snakemake.config, snakemake.output.run, repo=Path(snakemake.scriptdir).parent,
                              start_ms=runlock.taken_ms(snakemake.params.results))

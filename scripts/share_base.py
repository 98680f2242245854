"""Snakemake entry point of rule share_base: a fan-out's run gets a copy of the shared base eval
(results/base/), so that the run's folder reads like a single run's (summary, report, tracking)."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    import shutil

    from rewardloop.artifacts import atomic_path

    for name, source in snakemake.input.items():
        with atomic_path(snakemake.output[name]) as tmp:
            shutil.copyfile(source, tmp)

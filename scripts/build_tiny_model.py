"""Snakemake entry point of rule build_tiny_model."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.models.families import get_family

    tiny = dict(snakemake.params.tiny)
    get_family(snakemake.params.family).build_tiny(snakemake.output.model, num_threads=tiny.pop("threads"), **tiny)

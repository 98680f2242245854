"""Snakemake entry point of rule build_tiny_model."""
from rewardloop.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.models import build_tiny

    tiny = dict(snakemake.params.tiny)
    build_tiny(snakemake.params.family, snakemake.output.model, num_threads=tiny.pop("threads"), **tiny)

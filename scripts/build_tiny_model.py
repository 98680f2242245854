"""Snakemake entry point of rule build_tiny_model."""
from rewardloop.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.tiny_sd15 import build_tiny_sd15

    tiny = dict(snakemake.params.tiny)
    build_tiny_sd15(snakemake.output.model, num_threads=tiny.pop("threads"), **tiny)

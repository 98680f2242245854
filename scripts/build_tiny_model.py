"""Snakemake entry point of rule build_tiny_model."""
from rewardloop.snakemake_job import job

with job(snakemake):  # noqa: F821
    tiny = dict(snakemake.params.tiny)
    if snakemake.params.family == "sdxl":
        # Random init, for plumbing only: there is no pretraining recipe for the tiny SDXL.
        from rewardloop.tiny_sdxl import build_tiny_sdxl

        build_tiny_sdxl(snakemake.output.model, seed=tiny["seed"])
    else:
        from rewardloop.tiny_sd15 import build_tiny_sd15

        build_tiny_sd15(snakemake.output.model, num_threads=tiny.pop("threads"), **tiny)

"""Snakemake entry point of rule best (export.best): results/best -> the best iteration's LoRA folder."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.reports import best

    best.export_best(snakemake.params.results, snakemake.output.best, guard=snakemake.params.guard)

"""Snakemake entry point of rule preflight_gate: the preflight's figures against its tolerances."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake, uses_gpu=False):  # noqa: F821
    from rewardloop.stages import preflight

    preflight.judge(snakemake.input.figures, snakemake.params.tolerances, snakemake.output.report)

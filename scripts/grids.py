"""Snakemake entry point of rules grids and grid_base: PNG sheets of images with prompts and rewards."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.grids import load_scored, write_grid

    label = snakemake.params.label
    if "samples" in snakemake.input.keys():
        rollout = load_scored(snakemake.input.samples, snakemake.input.scores)
        write_grid(rollout, f"{label}: rollouts (reward)", snakemake.output.grid)
    write_grid(load_scored(snakemake.input.eval), f"{label}: eval (reward)", snakemake.output.eval_grid)

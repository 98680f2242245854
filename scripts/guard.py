"""Snakemake entry point of rule guard: an iteration's eval images against the base model's."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import guard

    names = snakemake.params.gold_names  # the order of gold_files(), so of both gold inputs
    guard.run(
        snakemake.params.cfg,
        snakemake.params.iteration,
        (snakemake.input.base_health, snakemake.input.health),
        (snakemake.input.base_eval, snakemake.input.eval),
        {name: pair for name, pair in zip(names, zip(snakemake.input.base_gold, snakemake.input.gold))},
        snakemake.output.verdict,
    )

"""Snakemake entry point of rule build_tiny_model."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.host import cpu_kernels
    from rewardloop.models.tiny import builds as tiny_builds

    recipe = tiny_builds.recipe_record(snakemake.params.family, snakemake.params.tiny, cpu_kernels.in_effect())
    tiny_builds.build(snakemake.output.model, recipe)

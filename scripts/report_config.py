"""Snakemake entry point of rule report_config: the validated config (defaults filled) for the report."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    import yaml

    from rewardloop.artifacts import atomic_path

    with atomic_path(snakemake.output.config) as tmp:
        tmp.write_text(yaml.safe_dump(dict(snakemake.params.cfg), sort_keys=False))

"""Snakemake entry point of rule benchmark_table: the run's benchmark table (base vs checkpoints) for the report."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.artifacts import atomic_path
    from rewardloop.reports.benchmark_table import columns, rows
    from rewardloop.reports.text_tables import csv_text

    table, folders = rows(snakemake.params.results)
    with atomic_path(snakemake.output.table) as tmp:
        tmp.write_text(csv_text(table, columns(folders)))

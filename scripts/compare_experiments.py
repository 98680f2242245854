"""Snakemake entry point of rule compare_experiments: the fan-out's comparison table and figure."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from pathlib import Path

    from rewardloop.artifacts import atomic_path
    from rewardloop.reports.compare import format_csv, plot, rows

    # results/report/compare.csv: the fan-out's results/, the config's runs alone
    table = rows(Path(snakemake.output.table).parents[1], only=snakemake.params.runs)
    with atomic_path(snakemake.output.table) as tmp:
        tmp.write_text(format_csv(table))
    plot(table, snakemake.output.figure)
    print(format_csv(table), end="")

"""One module per workflow stage. Each exposes ``run(...)`` taking plain paths and the stage's
config subset, so it runs the same from a Snakemake job, the CLI or a test."""

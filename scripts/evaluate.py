"""Snakemake entry point of rules eval, eval_base, eval_at_guidance and eval_base_at_guidance."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import evaluate

    evaluate.run(
        snakemake.params.cfg,
        snakemake.params.iteration,
        snakemake.params.lora_dir,
        snakemake.output.table,
        snakemake.output.metrics,
        threads=snakemake.threads,
        name=snakemake.params.get("name", "eval"),
    )

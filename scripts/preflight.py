"""Snakemake entry point of rule preflight: check iteration 0's rollouts against training before it trains."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.stages import preflight

    preflight.run(
        cfg=snakemake.params.cfg,
        samples_path=snakemake.input.samples,
        signal_path=snakemake.input.signal,
        latents_path=snakemake.input.latents,
        init_lora_dir=snakemake.params.lora_dir,
        rollout_lora_dir=snakemake.params.rollout_lora_dir,
        out_path=snakemake.output.figures,
        threads=snakemake.threads,
    )

"""Snakemake entry point of rule encode_offline_pairs."""
from rewardloop.runtime.snakemake_job import job

with job(snakemake):  # noqa: F821
    from rewardloop.signal import offline_pairs
    from rewardloop.stages.common import torch_setup

    cfg = snakemake.params.cfg
    offline_pairs.encode(
        cfg,
        snakemake.params.resolution,
        snakemake.params.random_crop,
        snakemake.params.num_workers,
        snakemake.output.pairs,
        snakemake.output.latents,
        device=torch_setup(snakemake.threads, cfg["device"]),
    )

"""Snakemake entry point of rule train: in this process, or `accelerate launch`-ed over several."""
from rewardloop.runtime.snakemake_job import iteration, job

with job(snakemake):  # noqa: F821
    from rewardloop.models.loading import check_gpu_count
    from rewardloop.runtime import launch, resources
    from rewardloop.stages import train

    cfg = snakemake.params.cfg
    kwargs = dict(
        cfg=cfg,
        iteration=iteration(snakemake),
        signal_path=snakemake.input.signal,  # pairs.parquet or advantages.parquet, by the objective
        latents_path=snakemake.input.latents,
        init_lora_dir=snakemake.params.lora_dir,
        out_dir=snakemake.params.out_dir,
        state_dir=snakemake.params.state_dir,
        metrics_path=snakemake.output.metrics,
        offline_pairs_path=snakemake.params.offline_pairs,
        offline_latents_path=snakemake.params.offline_latents,
    )
    processes = resources.train_processes(cfg["train"], getattr(snakemake.resources, "gpu", 0))
    nodes = int(snakemake.resources.get("nodes", 1) or 1)  # a profile's set-resources (docs/running-on-slurm.md)
    per_node = processes // nodes  # an uneven split was refused at startup (config.check_train_nodes)
    # as many GPUs on this node as its processes, before a launch that would fail in every rank
    check_gpu_count(cfg["device"], per_node, "train.num_processes (or the train job's gpu resource) / nodes")
    if processes == 1:
        train.run(**kwargs, threads=snakemake.threads)
    else:
        kwargs.update(threads=max(1, snakemake.threads // per_node), progress=False)
        if nodes > 1:
            launch.run_on_nodes(kwargs, nodes, per_node, snakemake.params.state_dir)
        else:
            launch.run_launched(kwargs, processes, cfg["train"]["mixed_precision"], snakemake.params.state_dir)

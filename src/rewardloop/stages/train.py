"""train: one iteration of DPO/SFT on the iteration's pairs, starting from model(it-1).

The group losses (GRPO, NFT) train on the advantages instead: see :mod:`rewardloop.stages.train_group`.

``train.adapter: lora`` continues model(it-1)'s LoRA; ``none`` fine-tunes every UNet weight of
model(it-1) (a full diffusers folder, or the base plus ``model.init_lora`` fused at iteration 0).
Offline pairs (``data.offline_pairs``, encoded once by rule encode_offline_pairs) are mixed in.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from rewardloop.models import loading as models
from rewardloop.signal.advantages import GROUP_LOSSES
from rewardloop.artifacts import config_hash
from rewardloop.models.lora import load_lora_into, save_lora
from rewardloop.stages.common import timed, torch_setup, write_metrics
from rewardloop.training.trainer import PreferenceTrainer, concat_pairs, load_pair_data, summarize


def _file_digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16] if path else "none"


def _init_digest(init_dir) -> str:
    """Identity of model(it-1): the LoRA's content hash; a full model's UNet file size and mtime."""
    if not init_dir:
        return "none"
    if models.is_full_model(init_dir):
        stat = (Path(init_dir) / models.FULL_UNET_WEIGHTS).stat()
        return f"full-{stat.st_size}-{stat.st_mtime_ns}"
    return _file_digest(Path(init_dir) / models.LORA_WEIGHTS)


def _load_models(cfg, init_dir, device):
    """(pipeline whose UNet is trained, frozen reference UNet or None)."""
    train_cfg, model_cfg = cfg["train"], cfg["model"]
    needs_reference = train_cfg["loss"] == "dpo"
    if train_cfg["adapter"] == "none":
        # Policy: model(it-1) itself. Reference: a frozen copy of it (None; previous) or the base.
        pipe = models.load_pipeline(model_cfg, lora_dir=init_dir, device=device)
        reference = None
        if needs_reference and train_cfg["reference"] == "base" and init_dir:
            reference = models.load_pipeline(model_cfg, device=device).unet
        return pipe, reference
    pipe = models.load_pipeline(model_cfg, device=device)
    reference = None
    if needs_reference and train_cfg["reference"] == "previous" and init_dir:
        reference = models.load_pipeline(model_cfg, lora_dir=init_dir, device=device).unet
    return pipe, reference


def run(cfg, iteration: int, pairs_path, latents_path, init_lora_dir, out_dir, state_dir, metrics_path,
        threads=1, progress=True, offline_pairs_path=None, offline_latents_path=None):
    """cfg: seed, model, train, data, device. ``init_lora_dir``: model(it-1)'s folder or None (the base).

    ``pairs_path``: pairs.parquet, or advantages.parquet for the group losses (grpo, nft).
    """
    from diffusers import DDPMScheduler

    if cfg["train"]["loss"] in GROUP_LOSSES:
        from rewardloop.stages import train_group

        return train_group.run(cfg, iteration, pairs_path, latents_path, init_lora_dir, out_dir, state_dir,
                               metrics_path, threads=threads, progress=progress)

    train_cfg = cfg["train"]
    family = cfg["model"]["family"]
    metrics = {"iteration": iteration}
    device = torch_setup(threads, cfg["device"])
    with timed(metrics, "perf/model_load_time"):
        pipe, reference = _load_models(cfg, init_lora_dir, device)
    noise_scheduler = DDPMScheduler.from_config(pipe.scheduler.config)
    trainer = PreferenceTrainer(train_cfg, pipe.unet, reference, noise_scheduler, cfg["seed"], iteration,
                                family=family, vae_scale_factor=pipe.vae_scale_factor)
    if init_lora_dir and train_cfg["adapter"] == "lora":
        load_lora_into(trainer.unet, family, init_lora_dir)
    data = load_pair_data(pairs_path, latents_path)
    metrics["pairs"] = len(data)
    if offline_pairs_path:
        offline = load_pair_data(offline_pairs_path, offline_latents_path)
        data = concat_pairs(data, offline, cfg["data"]["offline_fraction"])
        metrics["offline_pairs"] = len(offline)
    fingerprint = "-".join([config_hash(cfg), str(iteration), _file_digest(pairs_path), _init_digest(init_lora_dir),
                            _file_digest(offline_pairs_path)])
    with timed(metrics, "perf/train_time"):
        history, resumed_from = trainer.run(data, state_dir, fingerprint, progress=progress)
    if not trainer.accelerator.is_main_process:
        return  # every rank holds the same weights; rank 0 writes them
    if train_cfg["adapter"] == "none":
        from rewardloop.models.full_model import save_unet

        save_unet(trainer.accelerator.unwrap_model(trainer.unet), out_dir)
    else:
        save_lora(trainer.unet, family, train_cfg["lora"], out_dir)
    metrics["train/learning_rate"] = trainer.learning_rate
    metrics.update(summarize(history, resumed_from))
    metrics.update({"history": history, "processes": trainer.accelerator.num_processes})
    write_metrics(metrics, metrics_path)


if __name__ == "__main__":
    # One rank of `accelerate launch` (see rewardloop.runtime.launch): run's keyword arguments come as JSON.
    import json
    import os
    import sys

    import torch

    if torch.cuda.is_available():  # this rank's GPU, before any model is loaded onto "cuda"
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    run(**json.loads(Path(sys.argv[1]).read_text()))

"""train: one iteration of DPO/SFT on the iteration's pairs, starting from model(it-1)'s LoRA."""

from __future__ import annotations

import hashlib
from pathlib import Path

from rewardloop import models
from rewardloop.advantages import GROUP_LOSSES
from rewardloop.artifacts import config_hash
from rewardloop.lora import load_lora_into, save_lora
from rewardloop.stages.common import timed, torch_setup, write_metrics
from rewardloop.training import PreferenceTrainer, load_pair_data, summarize


def _file_digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16] if path else "none"


def run(cfg, iteration: int, pairs_path, latents_path, init_lora_dir, out_dir, state_dir, metrics_path,
        threads=1, progress=True):
    """cfg: seed, model, train, device. ``init_lora_dir``: model(it-1)'s LoRA or None (the base).

    ``pairs_path``: pairs.parquet, or advantages.parquet for the group losses (grpo, nft).
    """
    from diffusers import DDPMScheduler

    if cfg["train"]["loss"] in GROUP_LOSSES:
        from rewardloop.stages import train_group

        return train_group.run(cfg, iteration, pairs_path, latents_path, init_lora_dir, out_dir, state_dir,
                               metrics_path, threads=threads, progress=progress)

    train_cfg = cfg["train"]
    metrics = {"iteration": iteration}
    device = torch_setup(threads, cfg["device"])
    with timed(metrics, "perf/model_load_time"):
        pipe = models.load_pipeline(cfg["model"], device=device)
        reference = None
        if train_cfg["reference"] == "previous" and init_lora_dir:
            reference = models.load_pipeline(cfg["model"], lora_dir=init_lora_dir, device=device).unet
            reference.requires_grad_(False)
    noise_scheduler = DDPMScheduler.from_config(pipe.scheduler.config)
    trainer = PreferenceTrainer(train_cfg, pipe.unet, reference, noise_scheduler, cfg["seed"], iteration)
    if init_lora_dir:
        load_lora_into(trainer.unet, cfg["model"]["family"], init_lora_dir)
    data = load_pair_data(pairs_path, latents_path)
    lora_weights = Path(init_lora_dir) / models.LORA_WEIGHTS if init_lora_dir else None
    fingerprint = "-".join([config_hash(cfg), str(iteration), _file_digest(pairs_path), _file_digest(lora_weights)])
    with timed(metrics, "perf/train_time"):
        history, resumed_from = trainer.run(data, state_dir, fingerprint, progress=progress)
    save_lora(trainer.unet, cfg["model"]["family"], train_cfg["lora"], out_dir)
    metrics.update(summarize(history, resumed_from))
    metrics.update({"pairs": len(data), "history": history})
    write_metrics(metrics, metrics_path)

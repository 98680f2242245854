"""train for the group losses (grpo on sd3/sd15, nft on sd3): one iteration on the advantages."""

from __future__ import annotations

from pathlib import Path

from rewardloop.models import loading as models
from rewardloop.artifacts import config_hash
from rewardloop.models.families import get_family
from rewardloop.models.lora import load_lora_into, save_lora
from rewardloop.stages.common import timed, torch_setup, write_metrics
from rewardloop.stages.train import _file_digest


class GroupLossError(ValueError):
    pass


def unconditional_embeddings(pipe) -> tuple:
    """The empty prompt's conditioning for CFG: (embeddings [1, L, D], pooled [1, P] or None)."""
    from rewardloop.sampling.ddim import encode_conditioning

    empty = {k: v.cpu() for k, v in encode_conditioning(pipe, [""]).items()}
    return empty["prompt_embeds"], empty.get("pooled_embeds")


def run(cfg, iteration: int, advantages_path, latents_path, init_lora_dir, out_dir, state_dir, metrics_path,
        threads=1, progress=True):
    """cfg: seed, model, train, device."""
    train_cfg = cfg["train"]
    family = cfg["model"]["family"]
    if train_cfg["loss"] not in get_family(family).losses:
        raise GroupLossError(f"train.loss: {train_cfg['loss']} is not available for model.family {family}")
    metrics = {"iteration": iteration}
    device = torch_setup(threads, cfg["device"])
    with timed(metrics, "perf/model_load_time"):
        pipe = models.load_pipeline(cfg["model"], device=device)
        uncond = unconditional_embeddings(pipe)
    denoiser = getattr(pipe, models.denoiser_name(family))
    num_train = pipe.scheduler.config.num_train_timesteps
    if train_cfg["loss"] == "grpo":
        from rewardloop.objectives.grpo import GRPOTrainer, load_rollout_data, summarize_grpo

        data = load_rollout_data(advantages_path, latents_path, family)
        trainer = GRPOTrainer(train_cfg, denoiser, uncond, num_train, data, cfg["seed"], iteration)
        summarize = summarize_grpo
    else:
        from rewardloop.objectives.nft import NFTTrainer, load_nft_data, summarize_nft

        data = load_nft_data(advantages_path, latents_path)
        trainer = NFTTrainer(train_cfg, pipe.transformer, uncond, num_train, data, cfg["seed"], iteration)
        summarize = summarize_nft
    if init_lora_dir:
        load_lora_into(trainer.unet, family, init_lora_dir)
    trainer.after_init_lora()
    lora_weights = Path(init_lora_dir) / models.LORA_WEIGHTS if init_lora_dir else None
    fingerprint = "-".join([config_hash(cfg), str(iteration), _file_digest(advantages_path),
                            _file_digest(latents_path), _file_digest(lora_weights)])
    with timed(metrics, "perf/train_time"):
        history, resumed_from = trainer.run(data, state_dir, fingerprint, progress=progress)
    save_lora(trainer.unet, family, train_cfg["lora"], out_dir)
    metrics.update(summarize(history, resumed_from))
    metrics.update({"samples": len(data), "history": history})
    write_metrics(metrics, metrics_path)

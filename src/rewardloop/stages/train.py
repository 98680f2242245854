"""train: one iteration of the configured objective (``train.loss``), starting from model(it-1).

Reads the iteration's signal (pairs.parquet or advantages.parquet) and latents.safetensors,
loads the models the objective needs, and lets the Trainer run the objective's plan.
``train.adapter: lora`` continues model(it-1)'s LoRA; ``none`` fine-tunes every denoiser weight of
model(it-1) (a full diffusers folder, or the base plus ``model.init_lora`` fused at iteration 0).
Weight sets an objective keeps beside its LoRA (NFT's old policy) are read from and written to
``<model>/<name>/``. Offline pairs (``data.offline_pairs``, encoded once) are mixed in. Under
``train.distributed: fsdp`` the models are loaded on the CPU and sharded onto the GPUs block by block, and
every rank gathers the trained weights with rank 0, which writes them as without FSDP.
"""

from __future__ import annotations

import copy
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from rewardloop.artifacts import config_hash, read_table, read_tensors
from rewardloop.models import loading as models
from rewardloop.models.families import get_family
from rewardloop.models.lora import load_lora_into, save_lora
from rewardloop.objectives import Objective, TrainingInputs, get_objective
from rewardloop.objectives.registry import ModelInfo
from rewardloop.stages.common import timed, torch_setup, write_metrics
from rewardloop.training.trainer import Trainer


def file_digest(path) -> str:
    """A short content hash of a file ("none" for no file)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16] if path else "none"


def _model_digest(model_dir) -> str:
    """Identity of model(it-1): its LoRA's content hash; a full model's UNet file size and mtime."""
    if not model_dir:
        return "none"
    if models.is_full_model(model_dir):
        stat = (Path(model_dir) / models.FULL_UNET_WEIGHTS).stat()
        return f"full-{stat.st_size}-{stat.st_mtime_ns}"
    return file_digest(Path(model_dir) / models.LORA_WEIGHTS)


def load_models(model_cfg, adapter: str, reference_kind: str | None, init_dir, device):
    """(pipeline whose denoiser is trained, frozen reference denoiser or None = the LoRA disabled).

    No text encoder is loaded: training reads the prompt embeddings generate cached.
    """
    def load(lora_dir=None):
        return models.load_pipeline(model_cfg, lora_dir=lora_dir, device=device, text_encoders=False)

    denoiser = get_family(model_cfg["family"]).denoiser
    if adapter == "none":
        # Policy: model(it-1) itself. Reference: the base, or a frozen copy of model(it-1).
        pipe = load(init_dir)
        if reference_kind is None:
            return pipe, None
        if reference_kind == "base" and init_dir:
            return pipe, getattr(load(), denoiser)
        return pipe, copy.deepcopy(getattr(pipe, denoiser))
    pipe = load()
    if reference_kind == "previous" and init_dir:
        return pipe, getattr(load(init_dir), denoiser)
    return pipe, None


def _inputs(signal_path, latents_path) -> TrainingInputs:
    return TrainingInputs(read_table(signal_path).to_pandas(), read_tensors(latents_path), str(signal_path),
                          str(latents_path))


@dataclass
class TrainingRun:
    """One iteration's training, ready to run: the Trainer, the objective, its data and the inputs' identity."""

    trainer: Trainer
    objective: Objective
    data: object
    fingerprint: str
    metrics: dict

    def run(self, state_dir, progress: bool = True) -> tuple[list[dict], int]:
        return self.trainer.run(self.objective, self.data, state_dir, self.fingerprint, progress=progress)


def prepare(cfg, iteration: int, signal_path, latents_path, init_lora_dir, threads=1,
            offline_pairs_path=None, offline_latents_path=None) -> TrainingRun:
    """Load the models, the objective's data and model(it-1)'s weights (see run)."""
    family = get_family(cfg["model"]["family"])
    objective = get_objective(cfg["train"]["loss"]).from_config(cfg, iteration)
    train = objective.train
    metrics = {"iteration": iteration}
    device = torch_setup(threads, cfg["device"])
    if train.distributed == "fsdp" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        device = "cpu"  # whole on no GPU: fully_shard moves each block's shard to this rank's device
    with timed(metrics, "perf/model_load_time"):
        pipe, reference = load_models(cfg["model"], train.adapter, objective.reference(), init_lora_dir, device)
    trainer = Trainer(train, getattr(pipe, family.denoiser), cfg["seed"], iteration, reference)
    extra_files = [Path(init_lora_dir) / name / models.LORA_WEIGHTS for name in objective.extra_adapters
                   if init_lora_dir]
    for name, weights in zip(objective.extra_adapters, extra_files):
        if weights.is_file():  # else the objective starts it (NFT: a copy of the trained adapter)
            load_lora_into(trainer.model, family.name, weights.parent)
            trainer.policy.extra[name] = [p.detach().clone() for p in trainer.params]
    if init_lora_dir and train.adapter == "lora":
        load_lora_into(trainer.model, family.name, init_lora_dir)
    data = objective.load(_inputs(signal_path, latents_path),
                          ModelInfo(family, pipe.scheduler.config, pipe.vae_scale_factor))
    metrics["pairs" if objective.signal == "pairs" else "samples"] = len(data)
    if offline_pairs_path:
        data = objective.add_offline(data, _inputs(offline_pairs_path, offline_latents_path),
                                     cfg["data"]["offline_fraction"])
        metrics["offline_pairs"] = data.offline
    fingerprint = "-".join([config_hash(cfg), str(iteration), file_digest(signal_path), file_digest(latents_path),
                            _model_digest(init_lora_dir), file_digest(offline_pairs_path),
                            *[file_digest(f) for f in extra_files if f.is_file()]])
    return TrainingRun(trainer, objective, data, fingerprint, metrics)


def run(cfg, iteration: int, signal_path, latents_path, init_lora_dir, out_dir, state_dir, metrics_path,
        threads=1, progress=True, offline_pairs_path=None, offline_latents_path=None):
    """cfg: seed, model, train, data, device (and advantages for the group objectives).

    ``init_lora_dir``: model(it-1)'s folder or None (the base). Writes the trained LoRA (or full
    UNet) to ``out_dir``, the objective's extra weight sets to ``out_dir/<name>/``, and metrics.
    """
    job = prepare(cfg, iteration, signal_path, latents_path, init_lora_dir, threads, offline_pairs_path,
                  offline_latents_path)
    trainer, metrics = job.trainer, job.metrics
    family, train = cfg["model"]["family"], job.objective.train
    with timed(metrics, "perf/train_time"):
        history, resumed_from = job.run(state_dir, progress=progress)
    # Rank 0 writes the weights: under DDP every rank holds them; under FSDP every rank gathers them with it.
    main = trainer.accelerator.is_main_process
    with trainer.gathered(lora_only=train.adapter == "lora"):
        if main and train.adapter == "none":
            from rewardloop.models.full_model import save_unet

            save_unet(trainer.accelerator.unwrap_model(trainer.model), out_dir)
        elif main:
            save_lora(trainer.model, family, train.lora, out_dir)
    for name in job.objective.extra_adapters:
        with trainer.policy.swapped_in(name), trainer.gathered(lora_only=True):
            if main:
                save_lora(trainer.model, family, train.lora, Path(out_dir) / name)
    if not main:
        return
    metrics["train/learning_rate"] = trainer.learning_rate
    metrics.update(job.objective.summarize(history, resumed_from))
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
    # The process group ends here, with the rank: left to interpreter exit, gloo's threads can abort the
    # process ("terminate called without an active exception", SIGABRT; pytorch/pytorch#190489), which
    # failed a finished launch. Only after a rank ended well: after an error, another rank may be inside
    # a collective, and the teardown would wait for it.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()

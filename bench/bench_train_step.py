"""DPO train step on cached latents/embeddings vs a step that encodes every batch from pixels.

The second variant is how the diffusers DPO example trains: VAE-encode both images and run the text
encoder on every step. Prints pairs/s of both and the ratio (goal >= 1.5).
Usage: python bench/bench_train_step.py [--model DIR] [--pairs B] [--steps N] [--resolution PX]
On the real SD1.5 architecture (random weights), a full-size replica of stable-diffusion-v1-5:
    rewardloop build-replica --family sd15 --size full --out /tmp/sd15-full
    python bench/bench_train_step.py --model /tmp/sd15-full --pairs 1 --steps 2 --resolution 256
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from rewardloop.models import loading as models
from rewardloop.models.tiny import synthetic
from rewardloop.models.families import get_family
from rewardloop.objectives import get_objective
from rewardloop.objectives.preference import PairData
from rewardloop.objectives.registry import ModelInfo
from rewardloop.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


def make_trainer(pipe, batch: int):
    """(Trainer of a fresh LoRA on the pipeline's UNet, the DPO objective bound to the model)."""
    from rewardloop.config import validate

    train = {
        "loss": "dpo", "dpo": {"beta": 2000.0}, "batch_size": batch, "gradient_accumulation_steps": 1,
        "learning_rate": 1e-4, "weight_decay": 0.0, "lr_scheduler": "constant", "lr_warmup_steps": 0,
        "steps": 1000, "max_grad_norm": 1.0, "mixed_precision": "no",
        "lora": {"rank": 8, "alpha": 8, "targets": ["to_q", "to_k", "to_v", "to_out.0"]},
    }
    prompts = {k: str(ROOT / f"resources/prompts/{k}.txt") for k in ("train", "eval")}
    cfg = validate({"train": train, "prompts": prompts})  # the schema's defaults for the rest
    objective = get_objective("dpo").from_config(cfg, 0)
    objective.use_model(ModelInfo(get_family("sd15"), pipe.scheduler.config, pipe.vae_scale_factor))
    return Trainer(objective.train, pipe.unet, 0, 0), objective


def optimizer_step(setup, data: PairData, step: int) -> None:
    trainer, objective = setup
    loss, _ = objective.loss(trainer.policy, data, (step, 0))
    loss.backward()
    trainer.optimizer.step()
    trainer.optimizer.zero_grad()


@torch.no_grad()
def encode(pipe, pixels: torch.Tensor, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:

    latents = pipe.vae.encode(pixels).latent_dist.sample() * pipe.vae.config.scaling_factor
    return latents, get_family("sd15").encode(pipe, prompts)["prompt_embeds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=str(ROOT / "resources/models/tiny-sd15"))
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--resolution", type=int, help="image side in pixels (default: the model's own)")
    args = parser.parse_args()
    pipe = models.load_pipeline({"family": "sd15", "path": args.model})
    trainer = make_trainer(pipe, args.pairs)
    size = args.resolution or pipe.unet.config.sample_size * pipe.vae_scale_factor
    images, prompts = synthetic.make_batch(np.random.default_rng(0), 2 * args.pairs, synthetic.split_prompts(0)[0],
                                           size=size)
    pixels = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 127.5 - 1
    latents, embeds = encode(pipe, pixels, prompts[: args.pairs])
    cached = PairData(latents[: args.pairs], latents[args.pairs :], embeds)

    def run_cached(step):
        optimizer_step(trainer, cached, step)

    def run_encoding(step):
        lat, emb = encode(pipe, pixels, prompts[: args.pairs])
        optimizer_step(trainer, PairData(lat[: args.pairs], lat[args.pairs :], emb), step)

    timings = {}
    for name, fn in (("cached", run_cached), ("encode every step", run_encoding)):
        fn(0)  # warm-up
        started = time.perf_counter()
        for step in range(1, args.steps + 1):
            fn(step)
        timings[name] = args.pairs * args.steps / (time.perf_counter() - started)
    for name, rate in timings.items():
        print(f"{name:18s}: {rate:8.2f} pairs/s")
    print(f"ratio             : {timings['cached'] / timings['encode every step']:8.3f} (goal >= 1.5)")


if __name__ == "__main__":
    main()

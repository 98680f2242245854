"""Generate stage vs a bare diffusers ``pipe(...)`` loop on the same model and settings.

Prints images/s of both and their ratio (goal >= 0.95, Parquet and latents writing included).
Usage: python bench/bench_generate.py [--model DIR] [--images N] [--steps S] [--resolution R]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from rewardloop import config as cfgmod
from rewardloop.stages import generate

ROOT = Path(__file__).resolve().parents[1]


def bare_loop(model: str, prompts: list[str], per_prompt: int, steps: int, resolution: int, batch: int) -> float:
    from diffusers import DDIMScheduler, StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(model, safety_checker=None, requires_safety_checker=False)
    pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    pipe.set_progress_bar_config(disable=True)
    flat = [p for p in prompts for _ in range(per_prompt)]
    started = time.perf_counter()
    for i in range(0, len(flat), batch):
        pipe(flat[i : i + batch], num_inference_steps=steps, guidance_scale=5.0, height=resolution,
             width=resolution, generator=torch.Generator().manual_seed(i))
    return len(flat) / (time.perf_counter() - started)


def stage(model: str, prompt_file: str, per_prompt: int, steps: int, resolution: int, batch: int) -> float:
    cfg = cfgmod.validate({
        "model": {"path": model, "build_tiny": False},
        "prompts": {"train": prompt_file, "eval": prompt_file},
        "generate": {"images_per_prompt": per_prompt, "steps": steps, "resolution": resolution, "batch_size": batch},
        "device": "auto",
    })
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        started = time.perf_counter()
        generate.run(cfgmod.stage_config(cfg, "seed", "model", "prompts", "generate", "device"), 0, None,
                     tmp / "samples.parquet", tmp / "latents.safetensors", tmp / "m.json",
                     threads=torch.get_num_threads(), progress=False)
        elapsed = time.perf_counter() - started
    n_prompts = len([line for line in Path(prompt_file).read_text().splitlines() if line.strip()])
    return n_prompts * per_prompt / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=str(ROOT / "resources/models/tiny-sd15"))
    parser.add_argument("--prompts", default=str(ROOT / "resources/prompts/eval.txt"))
    parser.add_argument("--images-per-prompt", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--resolution", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    prompts = [line.strip() for line in Path(args.prompts).read_text().splitlines() if line.strip()]
    common = (args.images_per_prompt, args.steps, args.resolution, args.batch_size)
    stage(args.model, args.prompts, *common)  # warm-up (model files in page cache, kernels)
    ours = stage(args.model, args.prompts, *common)
    bare = bare_loop(args.model, prompts, *common)
    print(f"generate stage : {ours:8.2f} images/s (model load, sampling, decode, PNG, Parquet, latents)")
    print(f"bare pipe loop : {bare:8.2f} images/s (sampling and decode only; model loaded before timing)")
    print(f"ratio          : {ours / bare:8.3f} (goal >= 0.95)")


if __name__ == "__main__":
    main()

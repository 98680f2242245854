"""Which CPU kernels a process computes with, seen in the bytes: build a short tiny model in this
process, run one DPO iteration on it through the real stages (generate, score, pairs, train), and
print torch's kernel level, the seconds and the sha256 of the tensors of every weights file, the
rollouts' latents and the trained LoRA.
tests/unit/host/test_cpu_kernels.py and bench/bench_cpu_kernels.py run it in processes with the
environments of host/cpu_kernels.probe_environment (pinned or not, an AVX2-only CPU simulated).

``--gradients``: instead, one forward and backward pass of the tiny SD1.5's VAE, text encoder and UNet
(random weights, seed 0) and the sha256 of each one's gradients: the same convolutions, matmuls,
attention and norms in ~1 s, short enough to run under an emulator of another CPU (``qemu-x86_64 -cpu
EPYC-Rome-v2``), whose vendor and cache sizes the libraries then see (the test does)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from rewardloop import results_layout as layout
from rewardloop.host import cpu_kernels


def probe(out: Path, threads: int, unet_steps: int, vae_steps: int) -> dict:
    """Build a short tiny model at ``out/model`` in this process and train it one iteration: the kernel
    level torch dispatched to, the seconds of each and the sha256 of every weights file (the trained LoRA
    and the rollouts' latents included)."""
    import torch

    from rewardloop.models.tiny.sd15 import build_tiny_sd15

    start = time.perf_counter()
    model = out / "model"
    build_tiny_sd15(model, seed=0, vae_steps=vae_steps, unet_steps=unet_steps, num_threads=threads, progress=False)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    one_iteration(model, out / layout.iteration_name(0), threads)
    iteration_seconds = time.perf_counter() - start
    digests = {str(p.relative_to(out)): tensor_digest(p) for p in sorted(out.rglob("*.safetensors"))
               if "state" not in p.parts}
    return {**kernels_in_effect(), "threads": torch.get_num_threads(), "seconds": seconds,
            "iteration_seconds": iteration_seconds, "sha256": digests}


def kernels_in_effect() -> dict:
    """torch's kernel level and the pin's variables as this process sees them."""
    import torch

    return {"capability": torch.backends.cpu.get_cpu_capability(),
            "variables": {k: os.environ.get(k) for k in cpu_kernels.PINNED}}


def gradient_digests(threads: int) -> dict:
    """One forward and backward pass of the tiny SD1.5's three networks (random weights, seed 0): the
    kernel level and the sha256 of each network's gradients."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from rewardloop.models.tiny.sd15 import IMAGE_SIZE, TEXT_CONFIG, UNET_CONFIG, VAE_CONFIG

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    vae = AutoencoderKL(**VAE_CONFIG)
    text_encoder = CLIPTextModel(CLIPTextConfig(vocab_size=64, bos_token_id=0, eos_token_id=1, pad_token_id=1,
                                                **TEXT_CONFIG))
    unet = UNet2DConditionModel(**UNET_CONFIG)
    images = torch.rand(4, 3, IMAGE_SIZE, IMAGE_SIZE) * 2 - 1
    reconstruction = vae.decode(vae.encode(images).latent_dist.mean).sample
    (reconstruction - images).pow(2).mean().backward()
    hidden = text_encoder(torch.randint(2, 64, (4, 16))).last_hidden_state
    latents = torch.randn(4, UNET_CONFIG["in_channels"], IMAGE_SIZE // 4, IMAGE_SIZE // 4)
    unet(latents, torch.tensor([10, 200, 500, 900]), encoder_hidden_states=hidden).sample.pow(2).mean().backward()
    digests = {}
    for name, network in (("vae", vae), ("text_encoder", text_encoder), ("unet", unet)):
        digest = hashlib.sha256()
        for parameter in network.parameters():
            if parameter.grad is not None:
                digest.update(parameter.grad.numpy().tobytes())
        digests[name] = digest.hexdigest()
    return {**kernels_in_effect(), "threads": threads, "sha256": digests}


def tensor_digest(path: Path) -> str:
    """sha256 of a safetensors file's tensor bytes, without its header: the header's metadata names the
    folder a stage read (the rollouts' provenance), which differs between two probes' folders."""
    data = path.read_bytes()
    return hashlib.sha256(data[8 + int.from_bytes(data[:8], "little"):]).hexdigest()


def one_iteration(model: Path, out: Path, threads: int) -> None:
    """A short online DPO iteration of the default recipe on ``model``: 8 prompts x 4 images at 32 px, 5 steps, color_match
    pairs, 16 LoRA steps; the LoRA lands in ``out/train``."""
    from rewardloop import config
    from rewardloop.shape_domain import COLORS, SHAPES, caption
    from rewardloop.stages import generate, pairs, score, train

    out.mkdir(parents=True, exist_ok=True)
    prompts = out / "prompts.txt"  # the shape domain's captions, as the default's prompt files hold them
    prompts.write_text("".join(caption(SHAPES[i % 3], COLORS[i], COLORS[-1 - i]) + "\n" for i in range(8)))
    cfg = config.validate({
        "model": {"path": str(model), "build_tiny": False}, "device": "cpu",
        "prompts": {"train": str(prompts), "eval": str(prompts)},
        "generate": {"prompts_per_iteration": 8, "images_per_prompt": 4, "steps": 5, "resolution": 32, "batch_size": 32},
        "train": {"steps": 16, "batch_size": 8, "checkpointing_steps": 100}})
    samples, latents, scores, pair_table = (out / name for name in (
        layout.SAMPLES, layout.LATENTS, layout.SCORES, layout.signal_table("pairs")))
    generate.run(config.stage_config(cfg, "seed", "model", "prompts", "generate", "device"), 0, None,
                 samples, latents, out / "generate.json", threads=threads, progress=False)
    score.run(config.stage_config(cfg, "rewards", "score"), samples, scores, out / "score.json", progress=False)
    pairs.run(config.stage_config(cfg, "pairs"), scores, pair_table, out / "pairs.json")
    train.run(config.stage_config(cfg, "seed", "model", "train", "data", "device"), 0, pair_table,
              latents, None, out / "train", out / "state", out / "train.json", threads=threads, progress=False)


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python bench/kernel_probe.py",
                                     description="build a short tiny model, train it one iteration, print the kernel level and digests")
    parser.add_argument("out", type=Path, nargs="?", help="the folder the model and the iteration go to")
    parser.add_argument("--gradients", action="store_true",
                        help="only one forward and backward pass of the three networks: their gradients' sha256")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--unet-steps", type=int, default=60)
    parser.add_argument("--vae-steps", type=int, default=40)
    args = parser.parse_args(argv)
    if args.gradients:
        print(json.dumps(gradient_digests(args.threads)), flush=True)
    elif args.out is None:
        parser.error("OUT is required (unless --gradients)")
    else:
        print(json.dumps(probe(args.out, args.threads, args.unet_steps, args.vae_steps)), flush=True)


if __name__ == "__main__":
    main()

"""Write a random-init model with the real SD1.5 architecture as a diffusers folder (for benchmarks).

The UNet, VAE and CLIP text encoder take the SD1.5 config numbers (860 M / 84 M / 123 M parameters);
the weights are random, which does not change compute. The tokenizer is the project's offline one
(its vocabulary is smaller than CLIP's; the text encoder keeps CLIP's 49408-row embedding).
Nothing is downloaded. Stage benchmarks take the folder through the normal loading path:

    python bench/make_sd15_size_model.py /tmp/sd15-size
    python bench/bench_train_step.py --model /tmp/sd15-size --pairs 1 --steps 2 --resolution 256
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from rewardloop.models import tokenizer as tok
from rewardloop.models.tiny_sd15 import SD15_SCHEDULER

# runwayml/stable-diffusion-v1-5: unet/config.json, vae/config.json, text_encoder/config.json.
SD15_UNET = dict(
    sample_size=64,
    block_out_channels=(320, 640, 1280, 1280),
    down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
    up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
    layers_per_block=2,
    attention_head_dim=8,
    cross_attention_dim=768,
)
SD15_VAE = dict(
    block_out_channels=(128, 256, 512, 512),
    down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4,
    layers_per_block=2,
    latent_channels=4,
    sample_size=512,
    scaling_factor=0.18215,
)
SD15_TEXT = dict(
    vocab_size=49408,
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    max_position_embeddings=77,
    hidden_act="quick_gelu",
    projection_dim=768,
)


def build(out_dir: Path, seed: int = 0) -> None:
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(seed)
    tokenizer = tok.build_tokenizer(out_dir / "tokenizer", max_length=77)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, **SD15_TEXT))
    pipe = StableDiffusionPipeline(
        vae=AutoencoderKL(**SD15_VAE), text_encoder=text_encoder, tokenizer=tokenizer,
        unet=UNet2DConditionModel(**SD15_UNET), scheduler=DDIMScheduler(**SD15_SCHEDULER),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(out_dir, safe_serialization=True)
    params = {name: sum(p.numel() for p in getattr(pipe, name).parameters()) / 1e6
              for name in ("unet", "vae", "text_encoder")}
    print("parameters (M): " + ", ".join(f"{k} {v:.0f}" for k, v in params.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    build(args.out_dir, args.seed)


if __name__ == "__main__":
    main()

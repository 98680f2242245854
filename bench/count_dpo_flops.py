"""FLOP bound of caching latents and text embeddings in a DPO step, on the SD1.5 architecture.

bench_train_step.py measures the cached step against one that VAE-encodes both images and runs
the text encoder every step. This counts the FLOPs of each part (torch's FlopCounterMode on meta
tensors: nothing is computed or allocated) and prints the best ratio caching could give if every
operation ran at the same speed: the UNet's work stays (policy forward and backward on both
images, the reference forward on both), the encodes go.
Usage: python bench/count_dpo_flops.py [--resolution 512]
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.flop_counter import FlopCounterMode

# The published SD1.5 configs (stable-diffusion-v1-5: unet/, vae/, text_encoder/config.json).
from rewardloop.models.published import SD15_TEXT_ENCODER, SD15_UNET, SD15_VAE


def flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resolution", type=int, default=512)
    args = parser.parse_args()
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    side = args.resolution // 8
    with torch.device("meta"):
        unet, vae = UNet2DConditionModel.from_config(SD15_UNET), AutoencoderKL.from_config(SD15_VAE)
        text = CLIPTextModel(CLIPTextConfig.from_dict(dict(SD15_TEXT_ENCODER)))
        latents, embeds, timestep = torch.randn(1, 4, side, side), torch.randn(1, 77, 768), torch.tensor([10])
        image, tokens = torch.randn(1, 3, args.resolution, args.resolution), torch.zeros(1, 77, dtype=torch.long)
    unet_forward = flops(lambda: unet(latents, timestep, embeds))
    vae_encode = flops(lambda: vae.encode(image))
    text_encode = flops(lambda: text(tokens))
    print(f"SD1.5 at {args.resolution} px: UNet forward {unet_forward / 1e12:.3f} TFLOP, VAE encode "
          f"{vae_encode / 1e12:.3f} TFLOP per image, text encoder {text_encode / 1e12:.4f} TFLOP per prompt")
    encodes = 2 * vae_encode + text_encode  # per pair: both images, one prompt
    # Backward of a LoRA-adapted UNet: the input gradients (~1 forward) and, with full weight
    # gradients, another forward's worth; a LoRA's own weight gradients are small.
    for backward in (1.0, 2.0):
        kept = (2 + 2 * backward + 2) * unet_forward
        print(f"backward = {backward:.0f}x forward: cached step {kept / 1e12:.2f} TFLOP per pair, encoding adds "
              f"{encodes / 1e12:.2f}: best ratio {(kept + encodes) / kept:.2f} (goal >= 1.5)")


if __name__ == "__main__":
    main()

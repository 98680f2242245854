"""A tiny, randomly initialised SDXL-architecture model for plumbing tests (seconds to build).

Same layout as a real SDXL checkpoint (``StableDiffusionXLPipeline``: two CLIP text encoders, the
second with a projection whose pooled output feeds the UNet's ``text_time`` added embedding with
the 6 time ids), saved as a normal diffusers folder in safetensors. Untrained: its images are
noise, which is all a test of the loop's plumbing needs. The scheduler is DDIM with SDXL's noise
schedule (the one the workflow samples with).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from rewardloop.models.tiny import clip_tokenizer as tok
from rewardloop.artifacts import atomic_dir
from rewardloop.models.tiny.sd15 import SD15_SCHEDULER, VAE_CONFIG

TIME_EMBED_DIM = 8
TEXT_1 = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
              max_position_embeddings=tok.MAX_LENGTH, hidden_act="quick_gelu", projection_dim=32)
TEXT_2 = dict(TEXT_1, hidden_size=32, projection_dim=32)
UNET_CONFIG = dict(
    sample_size=8,
    in_channels=4,
    out_channels=4,
    block_out_channels=(32, 64),
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
    layers_per_block=1,
    attention_head_dim=(2, 4),
    norm_num_groups=8,
    transformer_layers_per_block=(1, 1),
    cross_attention_dim=TEXT_1["hidden_size"] + TEXT_2["hidden_size"],
    addition_embed_type="text_time",
    addition_time_embed_dim=TIME_EMBED_DIM,
    projection_class_embeddings_input_dim=TIME_EMBED_DIM * 6 + TEXT_2["projection_dim"],
    use_linear_projection=True,
)


def build_tiny_sdxl(out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """Write the tiny SDXL pipeline to ``out_dir`` atomically (random weights from ``seed``)."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        torch.manual_seed(seed)
        tokenizer = tok.build_tokenizer(tmp / "tokenizer")
        ids = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                   eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        pipe = StableDiffusionXLPipeline(
            vae=AutoencoderKL(**VAE_CONFIG),
            text_encoder=CLIPTextModel(CLIPTextConfig(**ids, **TEXT_1)),
            text_encoder_2=CLIPTextModelWithProjection(CLIPTextConfig(**ids, **TEXT_2)),
            tokenizer=tokenizer,
            tokenizer_2=tokenizer,
            unet=UNet2DConditionModel(**UNET_CONFIG),
            scheduler=DDIMScheduler(**SD15_SCHEDULER),  # SDXL shares SD1.5's scaled-linear betas
            force_zeros_for_empty_prompt=False,
        )
        pipe.save_pretrained(tmp, safe_serialization=True)
    return out_dir

"""A tiny, randomly initialised FLUX.1-architecture model for plumbing tests (seconds to build, offline).

The layout of a FLUX.1 checkpoint (``FluxPipeline``): a CLIP text encoder whose pooled output feeds
the transformer's pooled projection, a T5 encoder whose last hidden states are the text tokens, a
``FluxTransformer2DModel`` on 2x2-packed 16-channel latents and an ``AutoencoderKL`` with FLUX's
scaling and shift factors. Both tokenizers are built here without a download: the CLIP one of
:mod:`rewardloop.models.tokenizer`, the T5 SentencePiece one of :mod:`rewardloop.models.t5_tokenizer`.
Untrained: its images are noise, which is all a test of the loop's plumbing needs.

``guidance_embeds=True`` is FLUX.1-dev (guidance scale as an input, dev's dynamically shifted
scheduler); ``False`` is FLUX.1-schnell (no guidance embedding, its static shift-1 scheduler).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from rewardloop.artifacts import atomic_dir
from rewardloop.models import tokenizer as tok
from rewardloop.models.published import SD3_TOKENIZER_3_CONFIG

# The published scheduler/scheduler_config.json of FLUX.1-dev and FLUX.1-schnell.
DEV_SCHEDULER = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                     base_image_seq_len=256, max_image_seq_len=4096)
SCHNELL_SCHEDULER = dict(DEV_SCHEDULER, shift=1.0, use_dynamic_shifting=False)
# CLIP-L: FLUX reads CLIPTextModel's pooled output (hidden_size wide, no projection).
CLIP_CONFIG = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                   max_position_embeddings=tok.MAX_LENGTH, hidden_act="quick_gelu", projection_dim=32)
# T5 v1.1 (gated-gelu); a width other than CLIP's so a mix-up of the two shows in the shapes.
T5_CONFIG = dict(d_model=48, d_ff=96, d_kv=12, num_heads=4, num_layers=2, num_decoder_layers=0,
                 feed_forward_proj="gated-gelu", relative_attention_num_buckets=8, relative_attention_max_distance=32,
                 decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, is_encoder_decoder=False)
VAE_CONFIG = dict(
    in_channels=3, out_channels=3,
    down_block_types=("DownEncoderBlock2D",) * 3, up_block_types=("UpDecoderBlock2D",) * 3,
    block_out_channels=(16, 32, 32),  # 3 blocks: factor 4, so 32 px -> 8x8 latents -> 4x4 packed tokens
    layers_per_block=1, latent_channels=16, norm_num_groups=8, mid_block_add_attention=False,
    use_quant_conv=False, use_post_quant_conv=False,
    scaling_factor=0.3611, shift_factor=0.1159,  # FLUX.1's vae/config.json
)
TRANSFORMER_CONFIG = dict(
    patch_size=1,
    in_channels=4 * VAE_CONFIG["latent_channels"],  # packed: 4 latent channels per 2x2 patch
    num_layers=1,  # joint (double-stream) blocks
    num_single_layers=1,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=T5_CONFIG["d_model"],
    pooled_projection_dim=CLIP_CONFIG["hidden_size"],
    axes_dims_rope=(4, 6, 6),  # sums to attention_head_dim (FLUX.1: 16 + 56 + 56 = 128)
)


def build_tiny_flux_pipeline(out_dir: str | os.PathLike | None = None, seed: int = 0, guidance_embeds: bool = True):
    """The tiny FLUX.1 pipeline (random weights from ``seed``); with ``out_dir``, also saved there atomically
    (safetensors) so that it loads with ``FluxPipeline.from_pretrained``."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    from rewardloop.models.t5_tokenizer import build_t5_tokenizer

    def build(folder: Path):
        torch.manual_seed(seed)
        tokenizer = tok.build_tokenizer(folder / "tokenizer")
        tokenizer_2 = build_t5_tokenizer(folder / "tokenizer_2", SD3_TOKENIZER_3_CONFIG)  # T5's, max length 512
        clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                                            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                                            **CLIP_CONFIG))
        t5 = T5EncoderModel(T5Config(vocab_size=len(tokenizer_2), **T5_CONFIG))
        scheduler = FlowMatchEulerDiscreteScheduler(**(DEV_SCHEDULER if guidance_embeds else SCHNELL_SCHEDULER))
        return FluxPipeline(
            scheduler=scheduler, vae=AutoencoderKL(**VAE_CONFIG),
            text_encoder=clip.eval(), tokenizer=tokenizer, text_encoder_2=t5.eval(), tokenizer_2=tokenizer_2,
            transformer=FluxTransformer2DModel(**TRANSFORMER_CONFIG, guidance_embeds=guidance_embeds).eval(),
        )

    if out_dir is None:
        with tempfile.TemporaryDirectory() as tmp:  # the tokenizers are loaded from files, then kept in memory
            pipe = build(Path(tmp))
    else:
        with atomic_dir(out_dir) as tmp:
            pipe = build(tmp)
            pipe.save_pretrained(tmp, safe_serialization=True)
    pipe.set_progress_bar_config(disable=True)
    return pipe

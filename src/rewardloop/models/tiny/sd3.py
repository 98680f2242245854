"""Build a tiny SD3-family text-to-image model offline, pretrained on the synthetic domain.

The SD3 counterpart of :mod:`rewardloop.models.tiny.sd15`, and built the same way (same synthetic
images, same offline tokenizer, same autoencoder trainer):

1. a small ``AutoencoderKL`` with SD3's 16 latent channels and no quant convs (32x32 RGB <->
   8x8x16 latents); ``shift_factor`` / ``scaling_factor`` are the measured latent mean and 1/std,
   so ``(z - shift) * scale`` is ~unit variance, as in SD3;
2. two small ``CLIPTextModelWithProjection`` encoders jointly with an ``SD3Transformer2DModel``
   (MMDiT) on the rectified-flow loss ``|v - (noise - x0)|^2`` at ``x_t = (1-s) x0 + s noise``, with
   10 % caption dropout so classifier-free guidance works.

T5 is omitted (``text_encoder_3=None``; the SD3 pipeline supports it): a T5 tokenizer cannot be
built offline as simply as the CLIP one. Without T5 the rollouts use no T5 tokens
(``SD3.t5_tokens`` in :mod:`rewardloop.models.families.sd3`). The result is a plain diffusers folder
(``StableDiffusion3Pipeline``, ``FlowMatchEulerDiscreteScheduler`` with SD3's shift 3) plus
``build_info.json``, written atomically.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from rewardloop.artifacts import atomic_dir
from rewardloop.models.tiny import clip_tokenizer as tok
from rewardloop.models.tiny.pretraining import (IMAGE_SIZE, Recipe, loss_summary, parameter_count, pretrain_vae,
                                                recipe_summary, to_tensor, train_denoiser)
from rewardloop.models.tiny.sd15 import TEXT_CONFIG, VAE_CONFIG

SCHEDULER = dict(num_train_timesteps=1000, shift=3.0)  # SD3/SD3.5's scheduler_config.json
SD3_TEXT_CONFIG = {**TEXT_CONFIG, "hidden_size": 32, "intermediate_size": 128, "projection_dim": 32,
                   "num_hidden_layers": 3}
SD3_VAE_CONFIG = {**VAE_CONFIG, "latent_channels": 16, "use_quant_conv": False, "use_post_quant_conv": False}
TRANSFORMER_CONFIG = dict(
    sample_size=IMAGE_SIZE // 4,
    patch_size=1,
    in_channels=16,
    out_channels=16,
    num_layers=3,
    attention_head_dim=16,
    num_attention_heads=4,
    caption_projection_dim=64,  # = heads * head_dim
    joint_attention_dim=2 * SD3_TEXT_CONFIG["hidden_size"],  # both CLIP hidden states, concatenated
    pooled_projection_dim=2 * SD3_TEXT_CONFIG["projection_dim"],  # both pooled projections
    pos_embed_max_size=16,
)


def encode_text(text_encoders, tokenizer, captions):
    """SD3's CLIP conditioning without T5: (penultimate hidden states concatenated, pooled concatenated)."""
    ids = tokenizer(captions, padding="max_length", max_length=tokenizer.model_max_length,
                    truncation=True, return_tensors="pt").input_ids
    hidden, pooled = [], []
    for encoder in text_encoders:
        out = encoder(ids, output_hidden_states=True)
        hidden.append(out.hidden_states[-2])
        pooled.append(out.text_embeds)
    return torch.cat(hidden, dim=-1), torch.cat(pooled, dim=-1)


def train_transformer(transformer, text_encoders, tokenizer, vae, prompts, recipe: Recipe, rng, progress):
    """Jointly train the MMDiT and both text encoders on the rectified-flow loss; return loss history."""
    shift, scale = vae.config.shift_factor, vae.config.scaling_factor

    def step_loss(images, captions):
        with torch.no_grad():
            x0 = (vae.encode(to_tensor(images)).latent_dist.sample() - shift) * scale
        hidden, pooled = encode_text(text_encoders, tokenizer, captions)
        noise = torch.randn_like(x0)
        # Logit-normal sigmas (SD3's training density) put the effort on the mid-noise levels.
        sigma = torch.sigmoid(torch.randn(len(captions))).view(-1, 1, 1, 1)
        noisy = (1 - sigma) * x0 + sigma * noise
        pred = transformer(noisy, encoder_hidden_states=hidden, pooled_projections=pooled,
                           timestep=sigma.flatten() * SCHEDULER["num_train_timesteps"]).sample
        return F.mse_loss(pred, noise - x0)

    params = list(transformer.parameters()) + [p for e in text_encoders for p in e.parameters()]
    return train_denoiser(params, step_loss, prompts, recipe, rng, progress, "mmdit+text")


def build_tiny_sd3(out_dir: str | os.PathLike, progress: bool = True, record: dict | None = None,
                   **recipe) -> dict:
    """Build, pretrain and save the tiny SD3 model at ``out_dir`` atomically; return build stats.

    ``recipe``: the fields of :class:`~rewardloop.models.tiny.pretraining.Recipe`; ``unet_steps`` /
    ``unet_lr`` name the denoiser's (here the MMDiT's) pretraining.
    """
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    recipe = Recipe(**recipe)
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        t0 = time.perf_counter()
        rng, prompts = recipe.start()
        tokenizer = tok.build_tokenizer(tmp / "tokenizer")
        tokenizer_2 = tok.build_tokenizer(tmp / "tokenizer_2")  # SD3 loads two CLIP tokenizers
        vae = AutoencoderKL(**SD3_VAE_CONFIG)
        vae_losses, z = pretrain_vae(vae, recipe, rng, prompts, progress)
        mean, std = float(z.mean()), float(z.std())
        vae.register_to_config(shift_factor=mean, scaling_factor=1.0 / std)
        t_vae = time.perf_counter() - t0

        text_config = CLIPTextConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                                     eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                                     **SD3_TEXT_CONFIG)
        text_encoders = [CLIPTextModelWithProjection(text_config), CLIPTextModelWithProjection(text_config)]
        transformer = SD3Transformer2DModel(**TRANSFORMER_CONFIG)
        losses = train_transformer(transformer, text_encoders, tokenizer, vae, prompts, recipe, rng, progress)
        t_mmdit = time.perf_counter() - t0 - t_vae

        pipe = StableDiffusion3Pipeline(
            transformer=transformer.eval(), scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae,
            text_encoder=text_encoders[0].eval(), tokenizer=tokenizer,
            text_encoder_2=text_encoders[1].eval(), tokenizer_2=tokenizer_2,
            text_encoder_3=None, tokenizer_3=None)
        pipe.save_pretrained(tmp, safe_serialization=True)
        stats = {
            "family": "sd3",
            **recipe_summary(recipe),
            "shift_factor": mean,
            "scaling_factor": 1.0 / std,
            "vae_loss": loss_summary(vae_losses),
            "transformer_loss": loss_summary(losses),
            "params": {"vae": parameter_count(vae), "transformer": parameter_count(transformer),
                       "text_encoders": parameter_count(*text_encoders)},
            "wall_s": {"vae": t_vae, "transformer_text": t_mmdit, "total": time.perf_counter() - t0},
            "torch_threads": torch.get_num_threads(),
        }
        stats.update(record or {})  # what proves the build (models/tiny/builds.py)
        (tmp / "build_info.json").write_text(json.dumps(stats, indent=2))
    return stats

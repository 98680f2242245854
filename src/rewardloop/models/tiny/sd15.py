"""Build a tiny SD1.5-family text-to-image model offline, pretrained on the synthetic domain.

``build_tiny_sd15(out_dir)`` trains, on the CPU and in a few minutes:

1. a small ``AutoencoderKL`` (32x32 RGB <-> 8x8x4 latents) as an autoencoder with a small KL
   weight; ``scaling_factor`` is set to 1 / (measured latent std) so latents are ~unit variance;
2. a small ``CLIPTextModel`` jointly with a ``UNet2DConditionModel`` (cross-attention) on the
   epsilon-prediction DDPM loss with SD1.5's noise schedule and 10 % caption dropout, so
   classifier-free guidance works.

``pretrain_on="train"`` (the default) sees only the train prompts of ``synthetic.split_prompts(0)``,
so the eval prompts are shape/colour combinations the model never saw; ``pretrain_on="all"``
pretrains on every combination, like a real base model that has seen its eval prompts' concepts
(the workflow still keeps the eval prompts out of rollouts and DPO).
The result is a plain diffusers folder (``StableDiffusionPipeline``, DDIM
scheduler with SD1.5's settings, safetensors, no safety checker) plus ``build_info.json``,
written atomically: it is built in a temporary folder beside ``out_dir`` and renamed into place.
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
                                                to_tensor, train_denoiser)
# SD1.5's scheduler settings (v1-5 scheduler_config.json).
SD15_SCHEDULER = dict(
    num_train_timesteps=1000,
    beta_start=0.00085,
    beta_end=0.012,
    beta_schedule="scaled_linear",
    clip_sample=False,
    set_alpha_to_one=False,
    steps_offset=1,
    prediction_type="epsilon",
    timestep_spacing="leading",
)
TEXT_CONFIG = dict(
    hidden_size=64,
    intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    max_position_embeddings=tok.MAX_LENGTH,
    hidden_act="quick_gelu",
    projection_dim=64,
)
VAE_CONFIG = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=("DownEncoderBlock2D",) * 3,
    up_block_types=("UpDecoderBlock2D",) * 3,
    block_out_channels=(16, 32, 32),
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=8,
    mid_block_add_attention=False,
    sample_size=IMAGE_SIZE,
)
UNET_CONFIG = dict(
    sample_size=IMAGE_SIZE // 4,
    in_channels=4,
    out_channels=4,
    block_out_channels=(32, 64),
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    layers_per_block=1,
    attention_head_dim=8,
    norm_num_groups=8,
    cross_attention_dim=TEXT_CONFIG["hidden_size"],
)


def train_unet(unet, text_encoder, tokenizer, vae, prompts, recipe: Recipe, rng, progress):
    """Jointly train ``unet`` and ``text_encoder`` on epsilon prediction; return loss history."""
    from diffusers import DDPMScheduler

    noise_sched = DDPMScheduler(**{k: v for k, v in SD15_SCHEDULER.items() if k != "set_alpha_to_one"})
    scale = vae.config.scaling_factor

    def step_loss(images, captions):
        with torch.no_grad():
            latents = vae.encode(to_tensor(images)).latent_dist.sample() * scale
        ids = tokenizer(captions, padding="max_length", max_length=tokenizer.model_max_length,
                        truncation=True, return_tensors="pt").input_ids
        noise = torch.randn_like(latents)
        t = torch.randint(0, noise_sched.config.num_train_timesteps, (len(captions),))
        noisy = noise_sched.add_noise(latents, noise, t)
        pred = unet(noisy, t, encoder_hidden_states=text_encoder(ids)[0]).sample
        return F.mse_loss(pred, noise)

    params = list(unet.parameters()) + list(text_encoder.parameters())
    return train_denoiser(params, step_loss, prompts, recipe, rng, progress, "unet+text")


def build_tiny_sd15(out_dir: str | os.PathLike, progress: bool = True, record: dict | None = None,
                    **recipe) -> dict:
    """Build, pretrain and save the tiny model at ``out_dir`` atomically; return build stats.

    ``recipe``: the fields of :class:`~rewardloop.models.tiny.pretraining.Recipe` (seed, steps, rates, ...).
    """
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    recipe = Recipe(**recipe)
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        t0 = time.perf_counter()
        rng, prompts = recipe.start()
        tokenizer = tok.build_tokenizer(tmp / "tokenizer")
        vae = AutoencoderKL(**VAE_CONFIG)
        vae_losses, latents = pretrain_vae(vae, recipe, rng, prompts, progress)
        std = float(latents.std())
        vae.register_to_config(scaling_factor=1.0 / std)
        t_vae = time.perf_counter() - t0

        text_encoder = CLIPTextModel(CLIPTextConfig(
            vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **TEXT_CONFIG))
        unet = UNet2DConditionModel(**UNET_CONFIG)
        unet_losses = train_unet(unet, text_encoder, tokenizer, vae, prompts, recipe, rng, progress)
        t_unet = time.perf_counter() - t0 - t_vae

        pipe = StableDiffusionPipeline(
            vae=vae, text_encoder=text_encoder.eval(), tokenizer=tokenizer, unet=unet.eval(),
            scheduler=DDIMScheduler(**SD15_SCHEDULER), safety_checker=None, feature_extractor=None,
            requires_safety_checker=False)
        pipe.save_pretrained(tmp, safe_serialization=True)
        stats = {
            "seed": recipe.seed,
            "pretrain_on": recipe.pretrain_on,
            "image_size": IMAGE_SIZE,
            "vae_steps": recipe.vae_steps,
            "unet_steps": recipe.unet_steps,
            "batch_size": recipe.batch_size,
            "vae_batch_size": recipe.vae_batch_size,
            "vae_lr": recipe.vae_lr,
            "unet_lr": recipe.unet_lr,
            "kl_weight": recipe.kl_weight,
            "caption_dropout": recipe.caption_dropout,
            "latent_std": std,
            "scaling_factor": 1.0 / std,
            "vae_loss": loss_summary(vae_losses),
            "unet_loss": loss_summary(unet_losses),
            "params": {"vae": parameter_count(vae), "unet": parameter_count(unet),
                       "text_encoder": parameter_count(text_encoder)},
            "wall_s": {"vae": t_vae, "unet_text": t_unet, "total": time.perf_counter() - t0},
            "torch_threads": torch.get_num_threads(),
        }
        stats.update(record or {})  # what proves the build (models/tiny/builds.py)
        (tmp / "build_info.json").write_text(json.dumps(stats, indent=2))
    return stats

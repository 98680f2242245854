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
import math
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from rewardloop.models import synthetic, tokenizer as tok
from rewardloop.artifacts import atomic_dir

IMAGE_SIZE = 32
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


def _to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 (B, H, W, 3) -> float (B, 3, H, W) in [-1, 1]."""
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def _lr(step: int, total: int, peak: float, warmup: int = 100) -> float:
    """Linear warm-up then cosine decay to 10 % of ``peak``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_vae(vae, prompts, steps: int, batch_size: int, rng, kl_weight: float, lr: float, progress: bool):
    """Train ``vae`` as an autoencoder on rendered images; return the loss history."""
    opt = torch.optim.AdamW(vae.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for step in tqdm(range(steps), desc="vae", disable=not progress):
        for group in opt.param_groups:
            group["lr"] = _lr(step, steps, lr)
        x = _to_tensor(synthetic.make_batch(rng, batch_size, prompts, IMAGE_SIZE)[0])
        posterior = vae.encode(x).latent_dist
        recon = vae.decode(posterior.sample()).sample
        loss = F.mse_loss(recon, x) + kl_weight * posterior.kl().mean() / posterior.mean[0].numel()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def latent_std(vae, prompts, rng, n: int = 512) -> float:
    """Standard deviation of sampled (unscaled) latents of ``n`` rendered images."""
    x = _to_tensor(synthetic.make_batch(rng, n, prompts, IMAGE_SIZE)[0])
    return float(vae.encode(x).latent_dist.sample().std())


def train_unet(unet, text_encoder, tokenizer, vae, prompts, steps, batch_size, rng, lr, dropout, progress):
    """Jointly train ``unet`` and ``text_encoder`` on epsilon prediction; return loss history."""
    from diffusers import DDPMScheduler

    noise_sched = DDPMScheduler(**{k: v for k, v in SD15_SCHEDULER.items() if k != "set_alpha_to_one"})
    params = list(unet.parameters()) + list(text_encoder.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=1e-2)
    scale = vae.config.scaling_factor
    losses = []
    for step in tqdm(range(steps), desc="unet+text", disable=not progress):
        for group in opt.param_groups:
            group["lr"] = _lr(step, steps, lr)
        images, captions = synthetic.make_batch(rng, batch_size, prompts, IMAGE_SIZE)
        captions = ["" if u < dropout else c for u, c in zip(rng.random(batch_size), captions)]
        with torch.no_grad():
            latents = vae.encode(_to_tensor(images)).latent_dist.sample() * scale
        ids = tokenizer(captions, padding="max_length", max_length=tokenizer.model_max_length,
                        truncation=True, return_tensors="pt").input_ids
        noise = torch.randn_like(latents)
        t = torch.randint(0, noise_sched.config.num_train_timesteps, (batch_size,))
        noisy = noise_sched.add_noise(latents, noise, t)
        pred = unet(noisy, t, encoder_hidden_states=text_encoder(ids)[0]).sample
        loss = F.mse_loss(pred, noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def _summary(losses: list[float]) -> dict:
    """First loss and mean over the last 10 % of steps."""
    tail = losses[-max(1, len(losses) // 10):]
    return {"first": losses[0] if losses else None, "final_mean_last10pct": float(np.mean(tail)) if losses else None}


def pretraining_prompts(pretrain_on: str) -> list[str]:
    """The captions pretraining draws from: ``all`` combinations or only the ``train`` prompts."""
    train_prompts, eval_prompts = synthetic.split_prompts(0)
    if pretrain_on == "all":
        return train_prompts + eval_prompts
    if pretrain_on == "train":
        return train_prompts
    raise ValueError(f"tiny.pretrain_on: {pretrain_on!r}; expected 'all' or 'train'")


def build_tiny_sd15(
    out_dir: str | os.PathLike,
    seed: int = 0,
    vae_steps: int = 1200,
    unet_steps: int = 1200,
    progress: bool = True,
    batch_size: int = 64,
    vae_batch_size: int = 32,
    vae_lr: float = 4e-3,
    unet_lr: float = 1e-3,
    kl_weight: float = 1e-4,
    caption_dropout: float = 0.1,
    num_threads: int | None = None,
    pretrain_on: str = "train",
) -> dict:
    """Build, pretrain and save the tiny model at ``out_dir`` atomically; return build stats."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    if num_threads:
        torch.set_num_threads(num_threads)
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        t0 = time.perf_counter()
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        prompts = pretraining_prompts(pretrain_on)
        tokenizer = tok.build_tokenizer(tmp / "tokenizer")
        vae = AutoencoderKL(**VAE_CONFIG)
        vae_losses = train_vae(vae, prompts, vae_steps, vae_batch_size, rng, kl_weight, vae_lr, progress)
        vae.eval().requires_grad_(False)
        std = latent_std(vae, prompts, rng)
        vae.register_to_config(scaling_factor=1.0 / std)
        t_vae = time.perf_counter() - t0

        text_encoder = CLIPTextModel(CLIPTextConfig(
            vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **TEXT_CONFIG))
        unet = UNet2DConditionModel(**UNET_CONFIG)
        unet_losses = train_unet(unet, text_encoder, tokenizer, vae, prompts, unet_steps, batch_size,
                                 rng, unet_lr, caption_dropout, progress)
        t_unet = time.perf_counter() - t0 - t_vae

        pipe = StableDiffusionPipeline(
            vae=vae, text_encoder=text_encoder.eval(), tokenizer=tokenizer, unet=unet.eval(),
            scheduler=DDIMScheduler(**SD15_SCHEDULER), safety_checker=None, feature_extractor=None,
            requires_safety_checker=False)
        pipe.save_pretrained(tmp, safe_serialization=True)
        stats = {
            "seed": seed,
            "pretrain_on": pretrain_on,
            "image_size": IMAGE_SIZE,
            "vae_steps": vae_steps,
            "unet_steps": unet_steps,
            "batch_size": batch_size,
            "vae_batch_size": vae_batch_size,
            "vae_lr": vae_lr,
            "unet_lr": unet_lr,
            "kl_weight": kl_weight,
            "caption_dropout": caption_dropout,
            "latent_std": std,
            "scaling_factor": 1.0 / std,
            "vae_loss": _summary(vae_losses),
            "unet_loss": _summary(unet_losses),
            "params": {
                "vae": sum(p.numel() for p in vae.parameters()),
                "unet": sum(p.numel() for p in unet.parameters()),
                "text_encoder": sum(p.numel() for p in text_encoder.parameters()),
            },
            "wall_s": {"vae": t_vae, "unet_text": t_unet, "total": time.perf_counter() - t0},
            "torch_threads": torch.get_num_threads(),
        }
        (tmp / "build_info.json").write_text(json.dumps(stats, indent=2))
    return stats

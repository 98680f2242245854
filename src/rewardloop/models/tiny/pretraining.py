"""The one pretraining recipe of the embedded tiny models (SD1.5 and SD3 families).

Both builders train, on the CPU, from a seed: a small autoencoder on rendered synthetic images
(:func:`train_vae`), then the denoiser jointly with its text encoder(s) (:func:`train_denoiser`)
with the same learning-rate schedule, batches, caption dropout (so classifier-free guidance works)
and gradient clipping; only the loss of one step differs by family (epsilon prediction for SD1.5,
rectified flow for SD3). Same seed and thread count give a bit-identical model on one machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from rewardloop.models.tiny import synthetic

IMAGE_SIZE = 32


@dataclass(frozen=True)
class Recipe:
    """The pretraining options every tiny builder takes (the ``tiny:`` config section and build-tiny)."""

    seed: int = 0
    vae_steps: int = 1200
    unet_steps: int = 1200  # the denoiser's steps (a UNet or an MMDiT), so `tiny` means the same for both
    batch_size: int = 64
    vae_batch_size: int = 32
    vae_lr: float = 4e-3
    unet_lr: float = 1e-3
    kl_weight: float = 1e-4
    caption_dropout: float = 0.1
    num_threads: int | None = None
    pretrain_on: str = "train"
    # Stop each phase after this many optimizer steps, its learning-rate schedule still that of the whole
    # phase: the first steps of the real build, which a shipped model's proof rebuilds (models/tiny/builds.py)
    stop_after: int | None = None

    def phase_steps(self, steps: int) -> range:
        """The optimizer steps a phase of ``steps`` runs: all of them, or the first ``stop_after``."""
        return range(steps if self.stop_after is None else min(steps, self.stop_after))

    def start(self) -> tuple[np.random.Generator, list[str]]:
        """Threads and seeds set; (the data generator, the captions pretraining draws from)."""
        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        torch.manual_seed(self.seed)
        return np.random.default_rng(self.seed), pretraining_prompts(self.pretrain_on)


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 (B, H, W, 3) -> float (B, 3, H, W) in [-1, 1]."""
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def lr_at(step: int, total: int, peak: float, warmup: int = 100) -> float:
    """Linear warm-up then cosine decay to 10 % of ``peak``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_vae(vae, prompts, recipe: Recipe, rng, progress: bool):
    """Train ``vae`` as an autoencoder on rendered images; return the loss history."""
    steps, lr = recipe.vae_steps, recipe.vae_lr
    opt = torch.optim.AdamW(vae.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for step in tqdm(recipe.phase_steps(steps), desc="vae", disable=not progress):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr)
        x = to_tensor(synthetic.make_batch(rng, recipe.vae_batch_size, prompts, IMAGE_SIZE)[0])
        posterior = vae.encode(x).latent_dist
        recon = vae.decode(posterior.sample()).sample
        loss = F.mse_loss(recon, x) + recipe.kl_weight * posterior.kl().mean() / posterior.mean[0].numel()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def sample_latents(vae, prompts, rng, n: int = 512) -> torch.Tensor:
    """Sampled (raw) latents of ``n`` rendered images: what the scaling (and shift) factors are measured on."""
    return vae.encode(to_tensor(synthetic.make_batch(rng, n, prompts, IMAGE_SIZE)[0])).latent_dist.sample()


def pretrain_vae(vae, recipe: Recipe, rng, prompts, progress: bool) -> tuple[list[float], torch.Tensor]:
    """Train the autoencoder, freeze it; (its loss history, sampled latents to measure its scale on)."""
    losses = train_vae(vae, prompts, recipe, rng, progress)
    vae.eval().requires_grad_(False)
    return losses, sample_latents(vae, prompts, rng)


def train_denoiser(params: list, step_loss: Callable[[np.ndarray, list[str]], torch.Tensor], prompts, recipe: Recipe,
                   rng, progress: bool, desc: str) -> list[float]:
    """Train ``params`` on ``step_loss(images, captions)`` of rendered batches for the recipe's denoiser
    steps; return the loss history.

    A caption is replaced by the empty one with probability ``caption_dropout``; gradients are clipped to 1.
    """
    steps, lr, batch_size, dropout = recipe.unet_steps, recipe.unet_lr, recipe.batch_size, recipe.caption_dropout
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=1e-2)
    losses = []
    for step in tqdm(recipe.phase_steps(steps), desc=desc, disable=not progress):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr)
        images, captions = synthetic.make_batch(rng, batch_size, prompts, IMAGE_SIZE)
        captions = ["" if u < dropout else c for u, c in zip(rng.random(batch_size), captions)]
        loss = step_loss(images, captions)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def recipe_summary(recipe: Recipe) -> dict:
    """The recipe's fields a tiny model's build_info.json records (in this order)."""
    return {"seed": recipe.seed, "pretrain_on": recipe.pretrain_on, "image_size": IMAGE_SIZE,
            "vae_steps": recipe.vae_steps, "unet_steps": recipe.unet_steps, "batch_size": recipe.batch_size,
            "vae_lr": recipe.vae_lr, "unet_lr": recipe.unet_lr, "caption_dropout": recipe.caption_dropout}


def loss_summary(losses: list[float]) -> dict:
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


def parameter_count(*modules) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())

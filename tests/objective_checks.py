"""Behavioural checks of the objectives in seconds: tiny random-init denoisers built in memory,
synthetic training signals whose right direction is known, and held-out measures.

The measures (denoising error, flow-matching error, the log-likelihood of a transition) are written
here from the papers' formulas, not with the project's helpers, so a bug in those helpers cannot
hide in the measure. What is trained goes through the real path: the objective's ``load`` on
:class:`TrainingInputs` (the tables and tensors the train stage reads), its ``plan`` and ``loss``,
and the :class:`Trainer` with a real peft LoRA and optimizer.

Two "styles" of latents stand for good and bad images: a fixed pattern per style plus per-sample
noise, so held-out samples of a style are new instances the model never trained on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from rewardloop.config import load
from rewardloop.models.families import EMPTY_PROMPT, get_family
from rewardloop.objectives import get_objective
from rewardloop.objectives.registry import ModelInfo, TrainingInputs
from rewardloop.training.trainer import Trainer

from workflow_helpers import ROOT

PROMPT_TOKENS = 16


# --- tiny denoisers ---------------------------------------------------------------------------

def tiny_unet(seed: int = 0):
    from diffusers import UNet2DConditionModel

    from rewardloop.models.tiny.sd15 import UNET_CONFIG

    torch.manual_seed(seed)
    return UNet2DConditionModel(**UNET_CONFIG).eval()


def tiny_transformer(seed: int = 0):
    from diffusers import SD3Transformer2DModel

    from rewardloop.models.tiny.sd3 import TRANSFORMER_CONFIG

    torch.manual_seed(seed)
    return SD3Transformer2DModel(**TRANSFORMER_CONFIG).eval()


def tiny_flux_transformer(seed: int = 0, guidance_embeds: bool = True):
    """The tiny FLUX.1 transformer (rewardloop.models.tiny.flux): dev with the guidance embedding, schnell without."""
    from diffusers import FluxTransformer2DModel

    from rewardloop.models.tiny.flux import TRANSFORMER_CONFIG

    torch.manual_seed(seed)
    return FluxTransformer2DModel(**TRANSFORMER_CONFIG, guidance_embeds=guidance_embeds).eval()


def sd15_scheduler_config() -> dict:
    from rewardloop.models.tiny.sd15 import SD15_SCHEDULER

    return dict(SD15_SCHEDULER)


def alphas_cumprod() -> torch.Tensor:
    """SD1.5's scaled-linear schedule, from its definition (Rombach et al.; float64)."""
    cfg = sd15_scheduler_config()
    betas = torch.linspace(cfg["beta_start"] ** 0.5, cfg["beta_end"] ** 0.5, cfg["num_train_timesteps"],
                           dtype=torch.float64) ** 2
    return torch.cumprod(1 - betas, dim=0)


# --- synthetic data ---------------------------------------------------------------------------

def style_latents(style: int, count: int, shape, seed: int) -> torch.Tensor:
    """``count`` latents of a style: the style's fixed pattern plus per-sample noise (seed)."""
    pattern = torch.randn(shape, generator=torch.Generator().manual_seed(1000 + style))
    jitter = torch.randn((count, *shape), generator=torch.Generator().manual_seed(seed))
    return pattern + 0.1 * jitter


def prompt_embeds(count: int, width: int, seed: int) -> torch.Tensor:
    return torch.randn((count, PROMPT_TOKENS, width), generator=torch.Generator().manual_seed(seed))


def config(base: str, overrides: dict | None = None, **train) -> dict:
    """A validated config (``base`` under the repository root) with ``train`` and other overrides."""
    return load(ROOT / base, {**(overrides or {}), "train": {"checkpointing_steps": 1000, **train}})


def trained(cfg: dict, denoiser, inputs: TrainingInputs, model_info: ModelInfo, state_dir, seed: int = 0):
    """One iteration of ``cfg``'s objective on ``inputs`` with the real objective and Trainer:
    (objective, trainer, its data, the per-update history)."""
    objective = get_objective(cfg["train"]["loss"]).from_config({**cfg, "seed": seed}, 0)
    trainer = Trainer(objective.train, denoiser, seed, 0)
    data = objective.load(inputs, model_info)
    history, _ = trainer.run(objective, data, state_dir, "test", progress=False)
    assert history and all(math.isfinite(h["train/loss"]) for h in history)
    return objective, trainer, data, history


def train(cfg: dict, denoiser, inputs: TrainingInputs, model_info: ModelInfo, state_dir, seed: int = 0):
    """The model (with its LoRA) after one iteration of ``cfg``'s objective on ``inputs``."""
    return trained(cfg, denoiser, inputs, model_info, state_dir, seed)[1].model


# --- pairs (dpo, sft) on SD1.5 ----------------------------------------------------------------

def pair_inputs(chosen: torch.Tensor, rejected: torch.Tensor, embeds: torch.Tensor,
                pooled: torch.Tensor | None = None) -> TrainingInputs:
    """pairs.parquet rows and latents.safetensors tensors of pairs (prompt i: chosen[i] over rejected[i]);
    ``pooled``: the pooled embeddings of a family that has them (SD3, FLUX)."""
    rows, tensors = [], {}
    for i in range(len(chosen)):
        rows.append({"prompt_id": f"p{i}", "chosen": f"c{i}", "rejected": f"r{i}"})
        tensors[f"latents/c{i}"], tensors[f"latents/r{i}"] = chosen[i], rejected[i]
        tensors[f"prompt_embeds/p{i}"] = embeds[i]
        if pooled is not None:
            tensors[f"pooled_embeds/p{i}"] = pooled[i]
    return TrainingInputs(pd.DataFrame(rows), tensors, "pairs.parquet", "latents.safetensors")


@torch.no_grad()
def denoising_errors(unet, latents, embeds, seed: int = 7) -> torch.Tensor:
    """Per-sample ε-prediction MSE (DDPM, Ho et al. eq. 14) at fixed noise and spread timesteps."""
    gen = torch.Generator().manual_seed(seed)
    a = alphas_cumprod()
    errors = []
    for t in (100, 300, 500, 700, 900):
        noise = torch.randn(latents.shape, generator=gen)
        noisy = (a[t].sqrt() * latents + (1 - a[t]).sqrt() * noise).float()
        pred = unet(noisy, torch.full((len(latents),), t), encoder_hidden_states=embeds).sample
        errors.append(((pred - noise) ** 2).mean(dim=(1, 2, 3)))
    return torch.stack(errors).mean(0)


def sd15_model_info() -> ModelInfo:
    return ModelInfo(get_family("sd15"), sd15_scheduler_config(), 8)


# --- advantages (grpo, nft) on SD3 and SD1.5 ---------------------------------------------------

def advantage_table(advantages) -> pd.DataFrame:
    """advantages.parquet rows: sample s{i} of prompt p{i // 2} with advantage ``advantages[i]``."""
    return pd.DataFrame({"sample_id": [f"s{i}" for i in range(len(advantages))],
                         "prompt_id": [f"p{i // 2}" for i in range(len(advantages))],
                         "advantage": [float(a) for a in advantages]})


def conditioning_tensors(table: pd.DataFrame, width: int, pooled_width: int | None, seed: int) -> dict:
    """prompt_embeds (and pooled_embeds) per prompt, and the empty prompt's, as generate caches them."""
    prompts = list(dict.fromkeys(table.prompt_id))
    embeds = prompt_embeds(len(prompts) + 1, width, seed)
    tensors = {f"prompt_embeds/{p}": embeds[i] for i, p in enumerate(prompts)}
    tensors[f"{EMPTY_PROMPT}/prompt_embeds"] = embeds[-1]
    if pooled_width:
        pooled = torch.randn((len(prompts) + 1, pooled_width), generator=torch.Generator().manual_seed(seed + 1))
        tensors.update({f"pooled_embeds/{p}": pooled[i] for i, p in enumerate(prompts)})
        tensors[f"{EMPTY_PROMPT}/pooled_embeds"] = pooled[-1]
    return tensors


def flow_velocity(transformer, x, sigma, embeds, pooled) -> torch.Tensor:
    """The SD3 transformer's velocity (timestep = 1000 sigma, as the SD3 pipeline feeds it)."""
    t = torch.as_tensor(sigma, dtype=torch.float32).reshape(-1).expand(len(x)) * 1000
    return transformer(x, encoder_hidden_states=embeds, pooled_projections=pooled, timestep=t).sample.double()


def flux_velocity(transformer, x, sigma, embeds, pooled, guidance: float = 1.0) -> torch.Tensor:
    """The FLUX.1 transformer's velocity as FluxPipeline.__call__ feeds it (diffusers pipeline_flux.py), float64:
    the latents packed 2x2 (``_pack_latents``), the image position ids (``_prepare_latent_image_ids``), zero text
    ids, the timestep sigma x 1000 then / 1000, ``guidance = full([B], scale)`` where the transformer embeds it
    (dev; schnell has no guidance input), the output unpacked (``_unpack_latents``; at vae_scale_factor 1 its
    height and width are the latent's)."""
    from diffusers import FluxPipeline

    b, c, h, w = x.shape
    t = torch.as_tensor(sigma, dtype=torch.float32).reshape(-1).expand(b) * 1000
    config = transformer.config
    g = torch.full([b], float(guidance), dtype=torch.float32) if config.guidance_embeds else None
    out = transformer(hidden_states=FluxPipeline._pack_latents(x.float(), b, c, h, w), timestep=t / 1000, guidance=g,
                      pooled_projections=pooled.float(), encoder_hidden_states=embeds.float(),
                      txt_ids=torch.zeros(embeds.shape[1], 3),
                      img_ids=FluxPipeline._prepare_latent_image_ids(b, h // 2, w // 2, "cpu", torch.float32),
                      return_dict=False)[0]
    return FluxPipeline._unpack_latents(out, h, w, 1).double()


@dataclass(frozen=True)
class FlowModel:
    """A tiny random-init flow-matching denoiser of one family, with its hand-written velocity call: what the
    flow objectives' checks need to know of a family (the SD3 MMDiT, FLUX.1-dev, FLUX.1-schnell)."""

    name: str
    family: str
    text_width: int  # prompt_embeds' width (the transformer's joint_attention_dim)
    pooled_width: int
    latent: tuple = (16, 8, 8)
    guidance: float = 1.0  # the rollouts' guidance scale (an input of FLUX.1-dev's one pass)
    guidance_embeds: bool = False
    scheduler: tuple = (("num_train_timesteps", 1000), ("shift", 3.0))
    vae_scale_factor: int = 8

    def denoiser(self, seed: int = 0):
        return tiny_flux_transformer(seed, self.guidance_embeds) if self.family == "flux" else tiny_transformer(seed)

    def velocity(self, model, x, sigma, embeds, pooled) -> torch.Tensor:
        if self.family == "flux":
            return flux_velocity(model, x, sigma, embeds, pooled, self.guidance)
        return flow_velocity(model, x, sigma, embeds, pooled)

    def model_info(self) -> ModelInfo:
        return ModelInfo(get_family(self.family), dict(self.scheduler), self.vae_scale_factor)

    def overrides(self) -> dict:
        """Config overrides of the family (on configs/tiny_sd3_*.yaml)."""
        if self.family == "sd3":
            return {}
        return {"model": {"family": self.family, "path": f"resources/models/tiny-{self.name}"}}

    def train_options(self) -> dict:
        """train.* of the family: FLUX trains its adapter's LoRA targets (flow_grpo's train_flux.py)."""
        if self.family == "sd3":
            return {}
        return {"lora": {"targets": list(get_family(self.family).lora_targets)}}


def _flux_model(name: str, guidance_embeds: bool) -> FlowModel:
    from rewardloop.models.tiny.flux import (CLIP_CONFIG, DEV_SCHEDULER, SCHNELL_SCHEDULER, T5_CONFIG,
                                             VAE_CONFIG)

    scheduler = DEV_SCHEDULER if guidance_embeds else SCHNELL_SCHEDULER
    return FlowModel(name, "flux", T5_CONFIG["d_model"], CLIP_CONFIG["hidden_size"],
                     guidance=3.5 if guidance_embeds else 1.0, guidance_embeds=guidance_embeds,
                     scheduler=tuple(scheduler.items()), vae_scale_factor=2 ** (len(VAE_CONFIG["block_out_channels"]) - 1))


SD3 = FlowModel("sd3", "sd3", 64, 64)
FLUX_DEV = _flux_model("flux-dev", True)
FLUX_SCHNELL = _flux_model("flux-schnell", False)


def clean_latent_micro_batch(inputs: TrainingInputs, index: torch.Tensor):
    """(its rows of advantages.parquet, x0, prompt embeddings, pooled embeddings) for a clean-latent micro-batch."""
    rows = inputs.signal.iloc[index.numpy()]
    t = inputs.tensors
    x0 = torch.stack([t[f"latents/{s}"] for s in rows.sample_id])
    embeds = torch.stack([t[f"prompt_embeds/{p}"] for p in rows.prompt_id])
    pooled = torch.stack([t[f"pooled_embeds/{p}"] for p in rows.prompt_id])
    return rows, x0, embeds, pooled


@torch.no_grad()
def three_velocities(policy, x_t, sigma, embeds, pooled, extra: str, flow: FlowModel = SD3):
    """(trained, reference = LoRA disabled, with the weight set ``extra`` swapped in) velocities at x_t."""
    model = policy.model
    v = flow.velocity(model, x_t, sigma, embeds, pooled)
    model.disable_adapters()
    v_ref = flow.velocity(model, x_t, sigma, embeds, pooled)
    model.enable_adapters()
    current = [p.detach().clone() for p in policy.trainable]
    for p, other in zip(policy.trainable, policy.extra[extra]):
        p.copy_(other)
    v_extra = flow.velocity(model, x_t, sigma, embeds, pooled)
    for p, value in zip(policy.trainable, current):
        p.copy_(value)
    return v, v_ref, v_extra


def flow_sde_mean(v, x, sigma, sigma_next, std) -> torch.Tensor:
    """Flow-GRPO's SDE step mean (Liu et al. 2025, eq. 9 discretised; flow_grpo sde_step_with_logprob), float64."""
    x, dt = x.double(), sigma_next - sigma
    return x + (v + std**2 / (2 * sigma) * (x + (1 - sigma) * v)) * dt


def cps_mean_reference(v, x, sigma, sigma_next, std) -> torch.Tensor:
    """Coefficients-Preserving Sampling's mean (Wang & Yu 2025): with the predicted clean sample and noise
    x0 = x - sigma v, x1 = x + (1 - sigma) v, the interpolation at sigma_next keeps (1 - sigma_next) of x0 and
    sigma_next of noise, split into sqrt(sigma_next^2 - std^2) of x1 and std of fresh noise; float64."""
    x, v = x.double(), v.double()
    x0, x1 = x - sigma * v, x + (1 - sigma) * v
    return (1 - sigma_next) * x0 + math.sqrt(sigma_next**2 - std**2) * x1


def cps_log_likelihood(x, mean, scale=None) -> torch.Tensor:
    """flow_grpo's CPS log-prob: -mean((x - mean)^2), the Gaussian's scale and constants dropped; float64."""
    return -((x.double() - mean.double()) ** 2).mean(dim=(1, 2, 3))


def ddim_mean_reference(eps, x, a_t, a_prev, std) -> torch.Tensor:
    """DDIM's x_{t-1} mean (Song et al. 2021, eq. 12), float64."""
    x, eps = x.double(), eps.double()
    x0 = (x - math.sqrt(1 - a_t) * eps) / math.sqrt(a_t)
    return math.sqrt(a_prev) * x0 + math.sqrt(1 - a_prev - std**2) * eps


def ddim_std_reference(a_t: float, a_prev: float, eta: float) -> float:
    """DDIM's sigma_t(eta) (Song et al. 2021, eq. 16)."""
    return eta * math.sqrt((1 - a_prev) / (1 - a_t)) * math.sqrt(1 - a_t / a_prev)


def gaussian_log_likelihood(x, mean, scale) -> torch.Tensor:
    """log N(x; mean, scale^2 I), averaged over the latent dimensions (flow_grpo's convention), float64."""
    x, mean = x.double(), mean.double()
    return (-((x - mean) ** 2) / (2 * scale**2) - math.log(scale) - 0.5 * math.log(2 * math.pi)).mean(dim=(1, 2, 3))


def reference_nft_loss(v, v_old, x_t, x0, t, advantages, beta, clip):
    """NVlabs/DiffusionNFT train_nft_sd3.py's policy loss, written out sample by sample in float64."""
    total = 0.0
    for i in range(len(v)):
        r = min(max(advantages[i], -clip), clip) / clip / 2.0 + 0.5
        branch = []
        for velocity in (beta * v[i] + (1 - beta) * v_old[i], (1 + beta) * v_old[i] - beta * v[i]):
            error = (x_t[i] - t[i] * velocity) - x0[i]
            weight = max(np.abs(error).mean(), 1e-5)
            branch.append((error**2).mean() / weight)
        total += r * branch[0] / beta + (1 - r) * branch[1] / beta
    return clip * total / len(v)


# --- tiny pipelines (random init, in memory) ---------------------------------------------------

def tiny_sd15_pipeline(folder):
    """A random-init tiny SD1.5 pipeline (the tokenizer written to ``folder``): real diffusers classes."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline
    from transformers import CLIPTextConfig, CLIPTextModel

    from rewardloop.models.tiny import clip_tokenizer as tok
    from rewardloop.models.tiny.sd15 import SD15_SCHEDULER, TEXT_CONFIG, VAE_CONFIG

    tokenizer = tok.build_tokenizer(folder / "tokenizer")
    torch.manual_seed(0)
    text_encoder = CLIPTextModel(CLIPTextConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                                                eos_token_id=tokenizer.eos_token_id,
                                                pad_token_id=tokenizer.pad_token_id, **TEXT_CONFIG))
    return StableDiffusionPipeline(vae=AutoencoderKL(**VAE_CONFIG), text_encoder=text_encoder.eval(),
                                   tokenizer=tokenizer, unet=tiny_unet(), scheduler=DDIMScheduler(**SD15_SCHEDULER),
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)


def tiny_sd3_pipeline(folder):
    """A random-init tiny SD3 pipeline (two CLIP encoders, no T5; tokenizers written to ``folder``)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    from rewardloop.models.tiny import clip_tokenizer as tok
    from rewardloop.models.tiny.sd3 import SCHEDULER, SD3_TEXT_CONFIG, SD3_VAE_CONFIG

    tokenizers = [tok.build_tokenizer(folder / name) for name in ("tokenizer", "tokenizer_2")]
    torch.manual_seed(0)
    config = CLIPTextConfig(vocab_size=len(tokenizers[0]), bos_token_id=tokenizers[0].bos_token_id,
                            eos_token_id=tokenizers[0].eos_token_id, pad_token_id=tokenizers[0].pad_token_id,
                            **SD3_TEXT_CONFIG)
    encoders = [CLIPTextModelWithProjection(config).eval() for _ in range(2)]
    return StableDiffusion3Pipeline(
        transformer=tiny_transformer(), scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER),
        vae=AutoencoderKL(**SD3_VAE_CONFIG), text_encoder=encoders[0], tokenizer=tokenizers[0],
        text_encoder_2=encoders[1], tokenizer_2=tokenizers[1], text_encoder_3=None, tokenizer_3=None)

"""Tiny FLUX.1-architecture models, offline: a random-init one for plumbing tests (seconds) and a pretrained one.

The layout of a FLUX.1 checkpoint (``FluxPipeline``): a CLIP text encoder whose pooled output feeds
the transformer's pooled projection, a T5 encoder whose last hidden states are the text tokens, a
``FluxTransformer2DModel`` on 2x2-packed 16-channel latents and an ``AutoencoderKL`` with FLUX's
scaling and shift factors. Both tokenizers are built here without a download: the CLIP one of
:mod:`rewardloop.models.tiny.clip_tokenizer`, the T5 SentencePiece one of :mod:`rewardloop.models.tiny.t5_tokenizer`.

:func:`build_tiny_flux_pipeline` is untrained: its images are noise, which is all a test of the
loop's plumbing needs. :func:`build_tiny_flux` is the embedded tiny FLUX that recipes learn on
(``model.family: flux`` with ``model.build_tiny``): built and pretrained here on the synthetic
captioned images with the recipe of the tiny SD3 (:mod:`rewardloop.models.tiny.pretraining`), its loss's
velocity computed through the family adapter (``Flux.predict``), its conditioning through
``FluxPipeline.encode_prompt`` (``Flux._encode``), so pretraining and sampling share one code path.

``guidance_embeds=True`` is FLUX.1-dev (guidance scale as an input, dev's dynamically shifted
scheduler); ``False`` is FLUX.1-schnell (no guidance embedding, its static shift-1 scheduler).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from rewardloop.artifacts import atomic_dir
from rewardloop.models.tiny import clip_tokenizer as tok
from rewardloop.models.tiny.pretraining import (Recipe, loss_summary, parameter_count, pretrain_vae,
                                                recipe_summary, to_tensor, train_denoiser)
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

    from rewardloop.models.tiny.t5_tokenizer import build_t5_tokenizer

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


# The pretrained tiny FLUX: the tiny SD3's sizes (src/rewardloop/models/tiny/sd3.py) where FLUX has the
# same part, so that the two embedded flow models differ in their architecture, not in their budget.
PRETRAINED_CLIP_CONFIG = dict(CLIP_CONFIG, hidden_size=32, intermediate_size=128, num_hidden_layers=3,
                              projection_dim=32)  # = tiny SD3's SD3_TEXT_CONFIG
PRETRAINED_T5_CONFIG = dict(T5_CONFIG, d_model=64, d_ff=128, d_kv=16, num_heads=4, num_layers=3)  # SD3's joint width 64
PRETRAINED_TRANSFORMER_CONFIG = dict(
    TRANSFORMER_CONFIG,
    num_layers=2, num_single_layers=1,  # 3 blocks, as the tiny SD3's 3 joint blocks
    attention_head_dim=16, num_attention_heads=4,  # width 64, as the tiny SD3's
    joint_attention_dim=PRETRAINED_T5_CONFIG["d_model"],
    pooled_projection_dim=PRETRAINED_CLIP_CONFIG["hidden_size"],
    axes_dims_rope=(4, 6, 6),
)
# The guidance-embedding input during pretraining: uniform in [1, 5] (see build_tiny_flux), one draw per
# chunk of GUIDANCE_CHUNK samples of a batch (Flux.predict takes one scale per call).
GUIDANCE_RANGE = (1.0, 5.0)
TINY_T5_TOKENS = 16  # the pretrained tiny FLUX's T5 limit (tokenizer_2 model_max_length; Flux.t5_tokens reads it)
GUIDANCE_CHUNK = 8


def flow_loss(family, transformer, pipe, x0, captions):
    """The rectified-flow loss |v - (noise - x0)|^2 of one batch, v from ``family.predict`` (FLUX.1-dev's
    guidance embedding fed a scale drawn in GUIDANCE_RANGE per chunk of GUIDANCE_CHUNK samples)."""
    cond = family._encode(pipe, captions)  # with gradients: the text encoders train jointly
    noise = torch.randn_like(x0)
    # Logit-normal sigmas (SD3's training density, as the tiny SD3) put the effort on the mid-noise levels.
    sigma = torch.sigmoid(torch.randn(len(captions))).view(-1, 1, 1, 1)
    noisy = (1 - sigma) * x0 + sigma * noise
    low, high = GUIDANCE_RANGE
    preds = []
    for start in range(0, len(captions), GUIDANCE_CHUNK):
        part = slice(start, start + GUIDANCE_CHUNK)
        scale = low + (high - low) * float(torch.rand(()))
        preds.append(family.predict(transformer, noisy[part], sigma[part].flatten() * 1000,
                                    {key: value[part] for key, value in cond.items()}, guidance_scale=scale))
    return F.mse_loss(torch.cat(preds), noise - x0)


def build_tiny_flux(out_dir: str | os.PathLike, seed: int = 0, progress: bool = True,
                    record: dict | None = None, **recipe) -> dict:
    """Build, pretrain and save the tiny FLUX.1-dev model at ``out_dir`` atomically; return build stats.

    ``recipe``: the fields of :class:`~rewardloop.models.tiny.pretraining.Recipe` (``unet_steps`` /
    ``unet_lr`` name the transformer's pretraining), as the tiny SD3's: the same synthetic images and
    captions, 10 % caption dropout, logit-normal sigmas and the rectified-flow loss
    ``|v - (noise - x0)|^2`` at ``x_t = (1 - s) x0 + s noise``; the transformer and both text encoders
    (a tiny CLIP, whose pooled output FLUX reads, and a tiny T5, whose 512 padded tokens are the text
    tokens, as ``FluxPipeline`` encodes them) train jointly.

    The velocity is ``Flux.predict(transformer, x_t, s * 1000, {prompt_embeds, pooled_embeds},
    guidance_scale=g)``, the call the samplers make. FLUX.1-dev reads the guidance scale as an input
    (a guidance embedding). The loss's target does not depend on ``g`` (there is no CFG teacher to
    distil here), so the embedding learns to give the same velocity for every scale it is trained on;
    what the draw buys is that those scales are *trained* inputs: ``g`` uniform in [1, 5] covers both
    the scale the FLUX-dev recipes sample at (3.5, as flow_grpo and Flow-Factory use for dev) and the
    guidance 1 that CFG-free settings pass, where one fixed ``g`` would leave every other scale an
    untrained input of the embedding MLP. ``Flux.predict`` takes one scale per call, so ``g`` is drawn
    per chunk of 8 samples of each batch (8 scales a step), not per sample.

    Cost: its T5 tokenizer says 16 tokens (``TINY_T5_TOKENS``), which ``Flux.t5_tokens`` encodes, so the
    transformer attends over 16 + 16 tokens as the tiny SD3 does; at FluxPipeline's 512 a batch-64 step took
    17.5 s (1 thread, 2 shared cores) against 0.24 s (docs/flow-rl.md, "The tiny FLUX.1-dev").

    The result is a plain ``FluxPipeline`` folder (FLUX.1-dev's dynamically shifted scheduler; the VAE's
    ``shift_factor`` / ``scaling_factor`` the measured latent mean and 1/std, as the tiny SD3's) plus
    ``build_info.json``, written atomically.
    """
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    from rewardloop.models.families import get_family
    from rewardloop.models.tiny.t5_tokenizer import build_t5_tokenizer

    recipe = Recipe(seed=seed, **recipe)
    family = get_family("flux")
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        t0 = time.perf_counter()
        rng, prompts = recipe.start()
        tokenizer = tok.build_tokenizer(tmp / "tokenizer")
        # T5's, at 16 tokens (Flux.t5_tokens reads the tokenizer's limit): 512 made a pretraining step 70x slower
        tokenizer_2 = build_t5_tokenizer(tmp / "tokenizer_2",
                                         {**SD3_TOKENIZER_3_CONFIG, "model_max_length": TINY_T5_TOKENS})
        vae = AutoencoderKL(**VAE_CONFIG)
        vae_losses, z = pretrain_vae(vae, recipe, rng, prompts, progress)
        mean, std = float(z.mean()), float(z.std())
        vae.register_to_config(shift_factor=mean, scaling_factor=1.0 / std)
        t_vae = time.perf_counter() - t0

        clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                                            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                                            **PRETRAINED_CLIP_CONFIG))
        t5 = T5EncoderModel(T5Config(vocab_size=len(tokenizer_2), **PRETRAINED_T5_CONFIG))
        transformer = FluxTransformer2DModel(**PRETRAINED_TRANSFORMER_CONFIG, guidance_embeds=True)
        pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**DEV_SCHEDULER), vae=vae,
                            text_encoder=clip, tokenizer=tokenizer, text_encoder_2=t5, tokenizer_2=tokenizer_2,
                            transformer=transformer)
        shift, scale = vae.config.shift_factor, vae.config.scaling_factor

        def step_loss(images, captions):
            with torch.no_grad():
                x0 = (vae.encode(to_tensor(images)).latent_dist.sample() - shift) * scale
            return flow_loss(family, transformer, pipe, x0, captions)

        params = [p for module in (transformer, clip, t5) for p in module.parameters()]
        for module in (transformer, clip, t5):
            module.train()
        losses = train_denoiser(params, step_loss, prompts, recipe, rng, progress, "flux+text")
        t_transformer = time.perf_counter() - t0 - t_vae

        for module in (transformer, clip, t5):
            module.eval()
        pipe.save_pretrained(tmp, safe_serialization=True)
        stats = {
            "family": "flux",
            "variant": "dev",  # guidance embedded
            **recipe_summary(recipe),
            "guidance_range": list(GUIDANCE_RANGE),
            "guidance_chunk": GUIDANCE_CHUNK,
            "shift_factor": mean,
            "scaling_factor": 1.0 / std,
            "vae_loss": loss_summary(vae_losses),
            "transformer_loss": loss_summary(losses),
            "params": {"vae": parameter_count(vae), "transformer": parameter_count(transformer),
                       "text_encoders": parameter_count(clip, t5)},
            "wall_s": {"vae": t_vae, "transformer_text": t_transformer, "total": time.perf_counter() - t0},
            "torch_threads": torch.get_num_threads(),
        }
        stats.update(record or {})  # what proves the build (models/tiny/builds.py)
        (tmp / "build_info.json").write_text(json.dumps(stats, indent=2))
    return stats

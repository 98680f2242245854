"""FLUX.1 (dev and schnell): CLIP-L pooled + T5 conditioning, an MMDiT on 2x2-packed 16-channel latents, rectified flow.

Everything follows diffusers' ``FluxPipeline`` (diffusers/pipelines/flux/pipeline_flux.py, line
numbers of diffusers 0.42): the conditioning is ``encode_prompt`` (L312: T5's last hidden states,
L217, and CLIP's pooled output, L267); the denoiser reads the latents as 2x2 patches packed into
tokens (``_pack_latents`` L522, ``_unpack_latents`` L530) with rotary position ids (``text_ids``
zeros, L387; ``_prepare_latent_image_ids`` L508); the grid is linspace(1, 1/N, N) shifted by mu
from the image's token count (L823-L842, ``calculate_shift`` L73); the transformer gets the
timestep divided by 1000 (L903).

Guidance is *embedded*: FLUX.1-dev is guidance-distilled, its transformer reads the guidance scale
as an input (``guidance = full([B], scale)`` when ``transformer.config.guidance_embeds``, L847), in
one pass without an unconditional one. FLUX.1-schnell (timestep-distilled, ``guidance_embeds``
false) ignores the scale. Latents stay unpacked [B, 16, h, w] outside :meth:`Flux.predict`, as the
samplers expect; packing there is a permutation, so nothing is lost. Flow-Factory's FLUX.1 adapter
(X-GenGroup/Flow-Factory src/flow_factory/models/flux/flux1.py) and flow_grpo's
scripts/train_flux.py ``compute_log_prob`` call the transformer the same way.
"""

from __future__ import annotations

from typing import ClassVar

from rewardloop.models.families.base import ModelFamily, batch_timesteps, register_family

# FluxPipeline's max_sequence_length default (pipeline_flux.py L630), which FLUX.1-dev samples with;
# FLUX.1-schnell's model card and diffusers' FLUX docs pass 256 for schnell instead.
FLUX_T5_TOKENS = 512


def pack_latents(latents):
    """[B, C, h, w] -> [B, (h/2)(w/2), 4C]: FluxPipeline._pack_latents (L522), 2x2 patches as tokens."""
    batch, channels, height, width = latents.shape
    patches = latents.reshape(batch, channels, height // 2, 2, width // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return patches.reshape(batch, (height // 2) * (width // 2), channels * 4)


def unpack_latents(tokens, height: int, width: int):
    """[B, (h/2)(w/2), 4C] -> [B, C, h, w] (h, w: the latent size): FluxPipeline._unpack_latents (L530)."""
    batch, _, features = tokens.shape
    patches = tokens.reshape(batch, height // 2, width // 2, features // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return patches.reshape(batch, features // 4, height, width)


def latent_image_ids(rows: int, cols: int, device, dtype):
    """[rows * cols, 3] position ids (0, row, col) of the packed tokens: FluxPipeline._prepare_latent_image_ids."""
    import torch

    ids = torch.zeros(rows, cols, 3)
    ids[..., 1] = torch.arange(rows)[:, None]
    ids[..., 2] = torch.arange(cols)[None, :]
    return ids.reshape(rows * cols, 3).to(device=device, dtype=dtype)


def denoiser_config(denoiser):
    """The transformer's config, through a DDP wrapper (``.module``) too."""
    return getattr(denoiser, "module", denoiser).config


class PackedLatentFamily(ModelFamily):
    """A rectified-flow family whose transformer reads the VAE's latents as 2x2 patches packed into tokens (FLUX.1,
    Qwen-Image: ``pack_latents``): the latent side must be even, the transformer's in_channels count 4 latent
    channels per patch, its image tokens are the patches, and the grid is linspace(1, 1/N, N) shifted by their
    count (FluxPipeline L823, QwenImagePipeline L572)."""

    packing: ClassVar[str]  # how messages name the packing ("FLUX's 2x2 latent packing")

    def latent_shape(self, pipe, resolution: int) -> tuple[int, int, int]:
        factor = pipe.vae_scale_factor
        if resolution % (2 * factor):
            raise ValueError(f"generate.resolution: {resolution} is not divisible by {2 * factor} (the VAE factor "
                             f"{factor} x {self.packing}: the latent side must be even)")
        side = resolution // factor
        return (self.latent_channels(pipe.transformer.config), side, side)

    def latent_channels(self, denoiser_config) -> int:
        return denoiser_config["in_channels"] // 4  # 4 packed features per 2x2 patch (FluxPipeline L810)

    def image_tokens(self, pipe, resolution: int) -> int:
        _, height, width = self.latent_shape(pipe, resolution)
        return (height // 2) * (width // 2)

    def sigmas(self, scheduler, steps: int, image_tokens: int):
        import numpy as np

        from rewardloop.sampling.schedulers import flow_sigmas

        # sigmas = linspace(1, 1/N, N), shifted by mu = calculate_shift(image tokens, ...) where the config has
        # use_dynamic_shifting (FLUX.1-dev, Qwen-Image), else by its static shift (schnell: shift 1, the plain
        # linspace); a use_flow_sigmas config keeps the scheduler's own.
        start = None if scheduler.config.get("use_flow_sigmas") else np.linspace(1.0, 1 / steps, steps)
        return flow_sigmas(scheduler, steps, image_tokens, start=start)


@register_family
class Flux(PackedLatentFamily):
    name = "flux"
    pipeline = "FluxPipeline"
    denoiser = "transformer"
    text_encoders = ("text_encoder", "text_encoder_2")  # CLIP-L (pooled output only) and T5-XXL
    conditioning = ("prompt_embeds", "pooled_embeds")  # T5 states [L, 4096], CLIP pooled [768]
    default_resolution = 1024
    flow_matching = True
    guidance = "embedded"
    packing = "FLUX's 2x2 latent packing"
    # FLUX.1-dev is gated (its non-commercial license must be accepted on the hub). FLUX.1-schnell is
    # Apache-2.0 and not gated, but a hub id alone does not say which variant it is (only the folder's
    # transformer config does, guidance_embeds), so the family says gated: HF_TOKEN is passed through.
    gated = True
    lora_key_format = "peft"  # a transformer keeps peft's lora_A/B names, as SD3 (see sd3.py)
    # flow_grpo scripts/train_flux.py target_modules (the same list is Flow-Factory's
    # Flux1Adapter.default_target_modules): the joint blocks' image and text attention projections and
    # both feed-forwards; peft matches them by suffix, so attn.to_q/k/v also adapt the single blocks'.
    lora_targets = (
        "attn.to_k", "attn.to_q", "attn.to_v", "attn.to_out.0",
        "attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out",
        "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj", "ff_context.net.2",
    )
    sequence_lengths = {"tokenizer_2": FLUX_T5_TOKENS}
    # As SD3: flow_grpo config/dpo.py's beta 100 for a flow model's DPO on the velocity MSE.
    defaults = {"train.dpo.beta": 100}
    capabilities = frozenset({"recorded_steps"})  # flow SDE / CPS steps (tests/unit/models/test_flux_family.py replays them)
    tiny_builder = "rewardloop.models.tiny.flux:build_tiny_flux"
    tiny_pretrained = True

    def t5_tokens(self, pipe) -> int:
        """T5 tokens of the conditioning: FluxPipeline's 512, or fewer where the folder's T5 tokenizer says so
        (the published FLUX.1 tokenizer_2 says 512; the embedded tiny FLUX's 16, so that pretraining and
        rollouts on the CPU attend over 16 text tokens as the tiny SD3's do, not 512)."""
        return min(FLUX_T5_TOKENS, pipe.tokenizer_2.model_max_length)

    def _encode(self, pipe, prompts):
        # encode_prompt returns (T5 states, CLIP pooled, text_ids); text_ids are rebuilt in predict.
        embeds, pooled, _ = pipe.encode_prompt(prompt=prompts, prompt_2=None, device=pipe.device,
                                               max_sequence_length=self.t5_tokens(pipe))
        return {"prompt_embeds": embeds, "pooled_embeds": pooled}

    def resolution_factor(self, vae_config, denoiser_config):
        factor, _ = super().resolution_factor(vae_config, denoiser_config)
        return factor * 2, f"the VAE's factor {factor} x {self.packing}"

    def predict(self, denoiser, latents, timestep, cond, *, guidance_scale=1.0, uncond=None, dtype=None,
                pixel_size=None):
        """The velocity at ``latents`` [B, C, h, w] (fp32). ``uncond`` is ignored: guidance is embedded."""
        import torch

        dtype = dtype or denoiser.dtype
        batch, _, height, width = latents.shape
        device = latents.device
        embeds = cond["prompt_embeds"]
        # The pipeline casts the scheduler's timestep (sigma x 1000) to the latents' dtype and divides by
        # 1000 (L898, L903), a literal 1000 rather than num_train_timesteps; the transformer multiplies
        # by 1000 again. The same here, in the same order.
        t = batch_timesteps(timestep, latents).to(dtype) / 1000
        guidance = None
        if denoiser_config(denoiser).get("guidance_embeds", False):  # dev: the scale is an input (L847)
            guidance = torch.full([batch], float(guidance_scale), device=device, dtype=torch.float32)
        out = denoiser(
            hidden_states=pack_latents(latents).to(dtype),
            timestep=t,
            guidance=guidance,
            pooled_projections=cond["pooled_embeds"].to(dtype),
            encoder_hidden_states=embeds.to(dtype),
            txt_ids=torch.zeros(embeds.shape[1], 3, device=device, dtype=dtype),
            img_ids=latent_image_ids(height // 2, width // 2, device, dtype),
            return_dict=False,
        )[0]
        return unpack_latents(out.float(), height, width)

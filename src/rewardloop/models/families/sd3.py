"""Stable Diffusion 3 / 3.5: two CLIP encoders and optional T5, an MMDiT on 16-channel latents, rectified flow.

Velocity = transformer(x_t, timestep = sigma x 1000, prompt embeddings, pooled embeddings), with
two-pass classifier-free guidance. The grid is the shipped flow-match scheduler's (shift 3 for
SD3.5), shifted by the image's token count when its config asks for dynamic shifting.
"""

from __future__ import annotations

from rewardloop.models.families.base import ModelFamily, batch_timesteps, cfg_batch, combine, register_family

from rewardloop.models.published import T5_SEQUENCE_LENGTH


@register_family
class SD3(ModelFamily):
    name = "sd3"
    pipeline = "StableDiffusion3Pipeline"
    denoiser = "transformer"
    conditioning = ("prompt_embeds", "pooled_embeds")
    # T5 (text_encoder_3) is optional: a folder may list it as [null, null] (the tiny SD3 does).
    text_encoders = ("text_encoder", "text_encoder_2", "text_encoder_3")
    optional_components = {"T5": ("text_encoder_3", "tokenizer_3")}
    default_resolution = 1024
    flow_matching = True
    gated = True
    # A transformer keeps peft's lora_A/B names (diffusers' SD3 LoRA script): converted, its attention
    # projections would become lora.down beside add_*_proj's lora_A, and diffusers' loader, which reads the
    # format off one key, drops them.
    lora_key_format = "peft"
    lora_targets = ("to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2")  # as before the adapters
    sequence_lengths = {"tokenizer_3": T5_SEQUENCE_LENGTH}
    # flow_grpo config/dpo.py trains SD3.5-M DPO with beta 100 in the same -beta/2 convention (on the velocity MSE).
    defaults = {"train.dpo.beta": 100}
    capabilities = frozenset({"recorded_steps"})
    tiny_builder = "rewardloop.models.tiny.sd3:build_tiny_sd3"

    def t5_tokens(self, pipe) -> int:
        """T5 tokens of the conditioning: the pipeline default with T5; none without (they would all be zeros)."""
        return T5_SEQUENCE_LENGTH if getattr(pipe, "text_encoder_3", None) is not None else 0

    def _encode(self, pipe, prompts):
        embeds, _, pooled, _ = pipe.encode_prompt(
            prompt=prompts, prompt_2=None, prompt_3=None, device=pipe.device,
            do_classifier_free_guidance=False, max_sequence_length=self.t5_tokens(pipe))
        return {"prompt_embeds": embeds, "pooled_embeds": pooled}

    def resolution_factor(self, vae_config, denoiser_config):
        factor, _ = super().resolution_factor(vae_config, denoiser_config)
        patch = denoiser_config.get("patch_size", 1)
        return factor * patch, f"the VAE's factor {factor} x the transformer's patch size {patch}"

    def latent_shape(self, pipe, resolution: int) -> tuple[int, int, int]:
        factor = pipe.vae_scale_factor
        if resolution % factor:
            raise ValueError(f"generate.resolution: {resolution} is not divisible by the VAE factor {factor}")
        return (pipe.transformer.config.in_channels, resolution // factor, resolution // factor)

    def image_tokens(self, pipe, resolution: int) -> int:
        _, height, width = self.latent_shape(pipe, resolution)
        patch = pipe.transformer.config.patch_size
        return (height // patch) * (width // patch)

    def sigmas(self, scheduler, steps: int, image_tokens: int):
        from rewardloop.sampling.schedulers import flow_sigmas

        return flow_sigmas(scheduler, steps, image_tokens)

    def predict(self, denoiser, latents, timestep, cond, *, guidance_scale=1.0, uncond=None, dtype=None,
                pixel_size=None):
        dtype = dtype or denoiser.dtype
        t = batch_timesteps(timestep, latents)
        x, t, rows = cfg_batch(latents, t, cond, uncond, guidance_scale)
        # The timestep stays fp32, as StableDiffusion3Pipeline passes the scheduler's (cast to bf16, 790.37 was 792):
        # tests/unit/models/test_half_precision_fidelity.py
        out = denoiser(x.to(dtype), encoder_hidden_states=rows["prompt_embeds"].to(dtype),
                       pooled_projections=rows["pooled_embeds"].to(dtype), timestep=t).sample.float()
        return combine(out, len(latents), guidance_scale)

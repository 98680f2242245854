"""What the DDPM-style UNet families (SD1.5, SDXL) share: ε (or v) prediction, two-pass CFG, DDIM steps."""

from __future__ import annotations

from typing import Mapping

from rewardloop.models.families.base import ModelFamily, batch_timesteps, cfg_batch, combine


class UNetFamily(ModelFamily):
    denoiser = "unet"
    flow_matching = False
    guidance = "cfg"
    lora_key_format = "diffusers"
    lora_targets = ("to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2")  # attention and feed-forward
    # DiffusionDPO's --beta_dpo for SD1.5 and SDXL (its README: 5000 and 5000), on the ε-MSE.
    defaults = {"train.dpo.beta": 5000}

    def latent_shape(self, pipe, resolution: int) -> tuple[int, int, int]:
        factor = pipe.vae_scale_factor
        if resolution % factor:
            raise ValueError(f"generate.resolution: {resolution} is not divisible by the VAE factor {factor}")
        return (pipe.unet.config.in_channels, resolution // factor, resolution // factor)

    def unet_kwargs(self, cond: Mapping, pixel_size: int | None) -> dict:
        """Keyword arguments of ``unet(latents, t, **kwargs)`` for a batch of conditioning rows."""
        return {"encoder_hidden_states": cond["prompt_embeds"]}

    def predict(self, denoiser, latents, timestep, cond, *, guidance_scale=1.0, uncond=None, dtype=None,
                pixel_size=None):
        dtype = dtype or denoiser.dtype
        t = batch_timesteps(timestep, latents)
        x, t, rows = cfg_batch(latents, t, cond, uncond, guidance_scale)
        rows = {k: v.to(dtype) for k, v in rows.items()}
        out = denoiser(x.to(dtype), t, **self.unet_kwargs(rows, pixel_size)).sample.float()
        return combine(out, len(latents), guidance_scale)

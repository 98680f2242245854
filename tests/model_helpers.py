"""Small model checks shared by the tests."""

from __future__ import annotations

import torch


def probe(unet, seed=0):
    """The UNet's output on fixed random inputs: compares weights through their behaviour."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, unet.config.in_channels, 8, 8, generator=gen)
    context = torch.randn(2, 8, unet.config.cross_attention_dim, generator=gen)
    with torch.no_grad():
        return unet(x, torch.tensor([500, 100]), encoder_hidden_states=context).sample


def outputs_before_and_after_lora(pipe, lora_dir, **call_kwargs):
    """A plain diffusers pipeline's output from the same noise, without and with the exported LoRA."""
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(prompt="a red circle on a blue background", height=32, width=32, **call_kwargs)
    before = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
    pipe.load_lora_weights(str(lora_dir))
    after = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
    return before, after


def guided_eps(unet, x, timestep, embeds, uncond, guidance):
    """The SD1.5 adapter's (guided) ε prediction, in the argument order of the tests."""
    from rewardloop.models.families import get_family

    return get_family("sd15").predict(unet, x, timestep, {"prompt_embeds": embeds}, guidance_scale=guidance,
                                      uncond=None if uncond is None else {"prompt_embeds": uncond})


def guided_velocity(transformer, x, sigma, embeds, pooled, uncond=None, uncond_pooled=None, guidance=1.0,
                    num_train_timesteps=1000):
    """The SD3 adapter's (guided) velocity at ``sigma``, the timestep sigma x num_train_timesteps."""
    from rewardloop.models.families import get_family

    negative = None if uncond is None else {"prompt_embeds": uncond, "pooled_embeds": uncond_pooled}
    return get_family("sd3").predict(transformer, x, torch.as_tensor(sigma, dtype=torch.float32) * num_train_timesteps,
                                     {"prompt_embeds": embeds, "pooled_embeds": pooled}, guidance_scale=guidance,
                                     uncond=negative)

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

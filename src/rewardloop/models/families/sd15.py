"""Stable Diffusion 1.x: one CLIP text encoder, a UNet on 4-channel latents, 512 px."""

from __future__ import annotations

from rewardloop.models.families.base import register_family
from rewardloop.models.families.unet import UNetFamily


@register_family
class SD15(UNetFamily):
    name = "sd15"
    pipeline = "StableDiffusionPipeline"
    conditioning = ("prompt_embeds",)
    default_resolution = 512
    unused_components = ("safety_checker",)  # rewards judge the images; the checker would blank some
    capabilities = frozenset({"recorded_steps"})
    tiny_builder = "rewardloop.models.tiny.sd15:build_tiny_sd15"

    def load_kwargs(self) -> dict:
        return {"safety_checker": None, "requires_safety_checker": False}

    def _encode(self, pipe, prompts):
        tokens = pipe.tokenizer(prompts, padding="max_length", max_length=pipe.tokenizer.model_max_length,
                                truncation=True, return_tensors="pt")
        return {"prompt_embeds": pipe.text_encoder(tokens.input_ids.to(pipe.device))[0]}

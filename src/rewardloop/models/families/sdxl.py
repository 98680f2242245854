"""Stable Diffusion XL: two CLIP text encoders, pooled embeddings and the added time ids, 1024 px."""

from __future__ import annotations

from rewardloop.models.families.base import register_family
from rewardloop.models.families.unet import UNetFamily


def add_time_ids(pixel_size: int, batch: int, crop_top_left: tuple[int, int] = (0, 0)):
    """SDXL's micro-conditioning: (original h, w, crop top, left, target h, w), one row per image.

    Rollout images are generated at the training size, uncropped, so original = target = pixel_size.
    """
    import torch

    row = torch.tensor([pixel_size, pixel_size, *crop_top_left, pixel_size, pixel_size], dtype=torch.float32)
    return row.expand(batch, 6)


@register_family
class SDXL(UNetFamily):
    name = "sdxl"
    pipeline = "StableDiffusionXLPipeline"
    conditioning = ("prompt_embeds", "pooled_embeds")
    text_encoders = ("text_encoder", "text_encoder_2")
    default_resolution = 1024
    # No "recorded_steps": DDIM rollouts with log-probabilities are tested on SD1.5's UNet only (no SDXL
    # GRPO recipe or replica test yet), so GRPO is refused on SDXL rather than run untested.
    tiny_builder = "rewardloop.models.tiny.sdxl:build_tiny_sdxl"
    tiny_pretrained = False

    def _encode(self, pipe, prompts):
        # diffusers' own SDXL encoding: penultimate states of both encoders, concatenated, and the second
        # encoder's projected pooled output.
        embeds, _, pooled, _ = pipe.encode_prompt(prompts, device=pipe.device, num_images_per_prompt=1,
                                                  do_classifier_free_guidance=False)
        return {"prompt_embeds": embeds, "pooled_embeds": pooled}

    def unconditional(self, pipe):
        # StableDiffusionXLPipeline given no negative prompt guides against zeros, not the empty prompt's
        # encoding, where its model_index.json sets force_zeros_for_empty_prompt (the published base-1.0 does):
        # pipeline_stable_diffusion_xl.py encode_prompt, "zero_out_negative_prompt".
        import torch

        empty = self.encode(pipe, [""])
        if getattr(pipe.config, "force_zeros_for_empty_prompt", False):
            return {key: torch.zeros_like(value) for key, value in empty.items()}
        return empty

    def unet_kwargs(self, cond, pixel_size):
        if pixel_size is None:
            raise ValueError("sdxl: the UNet's added time ids need the image size (pixel_size)")
        pooled = cond["pooled_embeds"]
        time_ids = add_time_ids(pixel_size, len(pooled)).to(device=pooled.device, dtype=pooled.dtype)
        return {"encoder_hidden_states": cond["prompt_embeds"],
                "added_cond_kwargs": {"text_embeds": pooled, "time_ids": time_ids}}

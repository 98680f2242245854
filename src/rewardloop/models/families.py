"""What differs between model families: pipeline class, denoiser, text conditioning, UNet inputs.

A prompt's conditioning is a dict of tensors, cached once per prompt by the generate stage
(``<key>/<prompt_id>`` in latents.safetensors): SD1.5 has ``prompt_embeds`` [L, D]; SDXL adds
``pooled_embeds`` [P] from its second text encoder, and its UNet also takes the added time ids
(original size, crop top-left, target size), which are a function of the image size here.
SD3 (rectified flow, an MMDiT ``transformer`` instead of a UNet) has ``prompt_embeds`` and
``pooled_embeds`` too, and samples through :mod:`rewardloop.sampling.flow`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:  # torch is imported where used: the stage modules import this one at start-up
    import torch


EMPTY_PROMPT = "empty_prompt"  # cache keys empty_prompt/<key>: the empty prompt's conditioning (train.proportion_empty_prompts)


class FamilyError(ValueError):
    pass


@dataclass(frozen=True)
class Family:
    name: str
    pipeline: str  # diffusers pipeline class name
    conditioning: tuple[str, ...]  # cached conditioning tensors per prompt
    default_resolution: int
    denoiser: str = "unet"  # pipeline attribute of the denoiser (and LoRA key prefix)
    tiny_builder: str | None = None  # "module:function" building its embedded tiny model
    tiny_pretrained: bool = True  # False: the tiny model is random-init (plumbing only), built from a seed alone
    text_encoders: tuple[str, ...] = ("text_encoder",)  # pipeline components that encode prompts

    @property
    def tokenizers(self) -> tuple[str, ...]:
        return tuple(name.replace("text_encoder", "tokenizer") for name in self.text_encoders)

    @property
    def flow(self) -> bool:
        """Rectified flow (Euler / flow SDE sampling) rather than a DDPM-style UNet."""
        return self.denoiser == "transformer"

    def build_tiny(self, out_dir, seed: int = 0, **pretraining):
        """Build the embedded tiny model (rule build_tiny_model, ``rewardloop build-tiny``)."""
        import importlib

        if self.tiny_builder is None:
            raise FamilyError(f"model.family: {self.name} has no embedded tiny model")
        module, function = self.tiny_builder.split(":")
        build = getattr(importlib.import_module(module), function)
        return build(out_dir, seed=seed, **pretraining) if self.tiny_pretrained else build(out_dir, seed=seed)

    def pipeline_class(self):
        import diffusers

        return getattr(diffusers, self.pipeline)

    def load_kwargs(self) -> dict:
        """Extra from_pretrained arguments (SD1.5's safety checker is off: rewards judge images)."""
        if self.name == "sd15":
            return {"safety_checker": None, "requires_safety_checker": False}
        return {}

    def encode(self, pipe, prompts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Conditioning of each prompt: {key: [N, ...]}."""
        import torch

        with torch.no_grad():
            return self._encode(pipe, prompts)

    def _encode(self, pipe, prompts: Sequence[str]) -> dict[str, torch.Tensor]:
        if self.flow:
            from rewardloop.sampling.flow import encode_prompts

            embeds, pooled = encode_prompts(pipe, prompts)
            return {"prompt_embeds": embeds, "pooled_embeds": pooled}
        if self.name == "sdxl":
            # diffusers' own SDXL encoding: penultimate states of both encoders, concatenated, and
            # the second encoder's projected pooled output.
            embeds, _, pooled, _ = pipe.encode_prompt(
                list(prompts), device=pipe.device, num_images_per_prompt=1, do_classifier_free_guidance=False
            )
            return {"prompt_embeds": embeds, "pooled_embeds": pooled}
        tokens = pipe.tokenizer(
            list(prompts),
            padding="max_length",
            max_length=pipe.tokenizer.model_max_length,
            truncation=True,
            return_tensors="pt",
        )
        return {"prompt_embeds": pipe.text_encoder(tokens.input_ids.to(pipe.device))[0]}

    def unet_kwargs(self, cond: Mapping[str, torch.Tensor], pixel_size: int) -> dict:
        """Keyword arguments of ``unet(latents, t, **kwargs)`` for a batch of conditioning rows."""
        kwargs = {"encoder_hidden_states": cond["prompt_embeds"]}
        if self.name == "sdxl":
            pooled = cond["pooled_embeds"]
            time_ids = add_time_ids(pixel_size, len(pooled)).to(device=pooled.device, dtype=pooled.dtype)
            kwargs["added_cond_kwargs"] = {"text_embeds": pooled, "time_ids": time_ids}
        return kwargs


def add_time_ids(pixel_size: int, batch: int, crop_top_left: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """SDXL's micro-conditioning: (original h, w, crop top, left, target h, w), one row per image.

    Rollout images are generated at the training size, uncropped, so original = target = pixel_size.
    """
    import torch

    row = torch.tensor([pixel_size, pixel_size, *crop_top_left, pixel_size, pixel_size], dtype=torch.float32)
    return row.expand(batch, 6)


FAMILIES = {
    "sd15": Family("sd15", "StableDiffusionPipeline", ("prompt_embeds",), 512,
                   tiny_builder="rewardloop.models.tiny_sd15:build_tiny_sd15"),
    "sdxl": Family("sdxl", "StableDiffusionXLPipeline", ("prompt_embeds", "pooled_embeds"), 1024,
                   tiny_builder="rewardloop.models.tiny_sdxl:build_tiny_sdxl", tiny_pretrained=False,
                   text_encoders=("text_encoder", "text_encoder_2")),
    # T5 (text_encoder_3) is optional: a folder may list it as [null, null] (the tiny SD3 does).
    "sd3": Family("sd3", "StableDiffusion3Pipeline", ("prompt_embeds", "pooled_embeds"), 1024,
                  denoiser="transformer", tiny_builder="rewardloop.models.tiny_sd3:build_tiny_sd3",
                  text_encoders=("text_encoder", "text_encoder_2", "text_encoder_3")),
}


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise FamilyError(f"model.family: unknown family {name!r} (expected one of {', '.join(FAMILIES)})")
    return FAMILIES[name]

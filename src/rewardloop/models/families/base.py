"""The interface of a model family: what samplers, objectives and the workflow ask of a model.

One module per family in this package holds a subclass of :class:`ModelFamily` registered with
:func:`register_family`. The interface is what the samplers and objectives need and nothing else:

* ``encode(pipe, prompts)``: the prompts' conditioning, a dict {key: [N, ...]} of the keys in
  ``conditioning`` (the generate stage caches them; training never runs a text encoder);
* ``predict(denoiser, latents, timestep, cond, ...)``: the quantity the sampler integrates (ε or
  v-prediction for a DDPM-style family, the velocity for a rectified-flow one), guidance inside
  (two-pass classifier-free guidance, or a guidance embedding), in fp32. Latents are always the
  VAE's [B, C, h, w]; a family whose denoiser reads packed tokens packs and unpacks inside;
* ``decode_latents(vae, latents)`` and ``encode_pixels(vae, pixels)``: between the denoiser's latents and
  pixels, as the family's pipeline calls its VAE (``decode_images``: PIL images, batch by batch); a family
  whose VAE is called otherwise (a video VAE's frame axis) overrides these two, one that only normalises
  otherwise (per-channel mean and std) ``decoder_input`` and ``latents_from_encoder``;
* ``latent_shape``, ``image_tokens`` and ``sigmas`` (the time grid and its shift), the LoRA targets
  and key format, the folder's components, load options, and the config defaults that depend on it.

``flow_matching`` is declared, never inferred: rectified flow (velocity, Euler/SDE steps on a sigma
grid) or DDPM-style (ε/v, DDIM steps on integer timesteps). Code outside ``models/`` never branches
on a family's name; it asks the adapter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

if TYPE_CHECKING:  # torch is imported where used: the stage modules import this one at start-up
    import torch


EMPTY_PROMPT = "empty_prompt"  # cache keys empty_prompt/<key>: the empty prompt's conditioning
# cache keys negative_prompt/<key>: the conditioning a rollout guided against, where it is not the empty prompt's
NEGATIVE_PROMPT = "negative_prompt"


class FamilyError(ValueError):
    pass


class ModelFamily:
    """Base class; a family sets the class attributes and implements ``_encode``, ``predict`` and ``latent_shape``."""

    name: ClassVar[str]
    pipeline: ClassVar[str]  # the diffusers pipeline class
    denoiser: ClassVar[str]  # the pipeline attribute of the denoiser, also the LoRA key prefix
    text_encoders: ClassVar[tuple[str, ...]] = ("text_encoder",)
    conditioning: ClassVar[tuple[str, ...]] = ("prompt_embeds",)  # cached per prompt
    default_resolution: ClassVar[int]
    flow_matching: ClassVar[bool]  # rectified flow (velocity) rather than DDPM-style (ε / v)
    # "cfg": two passes (unconditional and conditional); "embedded": the guidance scale is an input of the
    # denoiser (FLUX.1-dev), no unconditional pass; the samplers ask, never assume.
    guidance: ClassVar[str] = "cfg"
    # What classifier-free guidance pairs the prompts with (:meth:`unconditional`): the empty prompt unless the
    # family's published usage says otherwise.
    negative_prompt: ClassVar[str] = ""
    # Components a folder may list as [null, null], by what they are: {"T5": ("text_encoder_3", "tokenizer_3")}.
    optional_components: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    unused_components: ClassVar[tuple[str, ...]] = ()  # loaded by the pipeline, never used here
    gated: ClassVar[bool] = False  # its hub checkpoints need HF_TOKEN (passed through, never stored)
    # "diffusers": lora.down/up names (diffusers' UNet LoRA scripts); "peft": lora_A/B (its transformer scripts)
    lora_key_format: ClassVar[str] = "diffusers"
    lora_targets: ClassVar[tuple[str, ...]] = ("to_q", "to_k", "to_v", "to_out.0")  # train.lora.targets: null
    # Tokens the pipeline encodes per tokenizer where that is not the tokenizer's own limit (T5).
    sequence_lengths: ClassVar[Mapping[str, int]] = {}
    # Config keys whose default depends on the family ("train.dpo.beta": 100): the schema's null there
    # means "the family's", filled at validation and shown by `rewardloop objectives`.
    defaults: ClassVar[Mapping[str, Any]] = {}
    # What objectives may ask for beyond the kind (see ``traits``): "recorded_steps" = its rollouts can
    # record their stochastic steps with log-probabilities (flow SDE / CPS, or DDIM with eta > 0).
    capabilities: ClassVar[frozenset[str]] = frozenset()
    tiny_builder: ClassVar[str | None] = None  # "module:function" building its embedded tiny model
    tiny_pretrained: ClassVar[bool] = True  # False: random-init (plumbing only), built from a seed alone

    @property
    def tokenizers(self) -> tuple[str, ...]:
        return tuple(name.replace("text_encoder", "tokenizer") for name in self.text_encoders)

    @property
    def traits(self) -> frozenset[str]:
        """What an objective's ``needs`` are matched against: the kind ("flow_matching" or "ddpm") and the
        family's capabilities."""
        return frozenset({"flow_matching" if self.flow_matching else "ddpm"}) | self.capabilities

    @property
    def uses_cfg(self) -> bool:
        """Guidance needs the empty prompt's conditioning and a second pass."""
        return self.guidance == "cfg"

    def cfg_free_scale(self, rollout_scale: float) -> float:
        """The guidance an objective that trains without CFG (NFT, AWM, DPO, SFT) predicts at: none (1) where
        guidance is a second pass; the rollout's own where it is an input of the one pass (an embedding)."""
        return float(rollout_scale) if self.guidance == "embedded" else 1.0

    def __repr__(self) -> str:
        return f"<model family {self.name}>"

    # Loading -------------------------------------------------------------------------------------
    def pipeline_class(self):
        import diffusers

        return getattr(diffusers, self.pipeline)

    def load_kwargs(self) -> dict:
        """Extra ``from_pretrained`` arguments (e.g. components this workflow never uses, as None)."""
        return {name: None for name in self.unused_components}

    def tiny_build_function(self):
        """The function that builds the embedded tiny model (called through models/tiny/builds.py)."""
        import importlib

        if self.tiny_builder is None:
            raise FamilyError(f"model.family: {self.name} has no embedded tiny model")
        module, function = self.tiny_builder.split(":")
        return getattr(importlib.import_module(module), function)

    def resolution_factor(self, vae_config: Mapping, denoiser_config: Mapping) -> tuple[int, str]:
        """(the pixel multiple an image size must be, and why) from the folder's VAE and denoiser configs."""
        factor = 2 ** (len(vae_config.get("block_out_channels", [0] * 4)) - 1)
        return factor, f"the VAE's factor {factor}"

    # Conditioning --------------------------------------------------------------------------------
    def encode(self, pipe, prompts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Conditioning of each prompt: {key: [N, ...]}."""
        import torch

        with torch.no_grad():
            return self._encode(pipe, list(prompts))

    def _encode(self, pipe, prompts: list[str]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    # Latents and time ------------------------------------------------------------------------------
    def latent_shape(self, pipe, resolution: int) -> tuple[int, int, int]:
        """(channels, h, w) of one image's latents at ``resolution`` px, as the VAE decodes them."""
        raise NotImplementedError

    # The VAE ---------------------------------------------------------------------------------------
    def decode_latents(self, vae, latents: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] ([B, 3, H, W], the VAE's dtype) of the denoiser's ``latents``, as the pipeline decodes."""
        return vae.decode(self.decoder_input(vae, latents)).sample

    def encode_pixels(self, vae, pixels: torch.Tensor, generator=None) -> torch.Tensor:
        """The denoiser's latents of ``pixels`` in [-1, 1]: a sample of the VAE's posterior (as the diffusers
        training scripts encode their images), normalised as the pipeline's latents are."""
        return self.latents_from_encoder(vae, vae.encode(pixels).latent_dist.sample(generator=generator))

    def decode_images(self, pipe, latents: torch.Tensor, batch_size: int) -> list:
        """PIL images of ``latents``, ``batch_size`` at a time. A VAE whose config sets ``force_upcast`` (SDXL's:
        its fp16 activations overflow to NaN, black images) decodes in fp32 when the pipeline runs in fp16, as
        diffusers' pipelines do."""
        import torch
        from PIL import Image

        vae = pipe.vae
        if vae.dtype == torch.float16 and getattr(vae.config, "force_upcast", False):
            vae.to(torch.float32)
        images = []
        with torch.no_grad():
            for start in range(0, len(latents), batch_size):
                chunk = latents[start : start + batch_size].to(device=pipe.device, dtype=vae.dtype)
                pixels = ((self.decode_latents(vae, chunk).float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
                images.extend(Image.fromarray(array) for array in pixels.permute(0, 2, 3, 1).cpu().numpy())
        return images

    def decoder_input(self, vae, latents: torch.Tensor) -> torch.Tensor:
        """What the family's pipeline hands ``vae.decode`` for sampled ``latents``: unscaled by the VAE config's
        ``scaling_factor`` and shifted back by its ``shift_factor`` where it has one (SD3 and FLUX VAEs)."""
        shift = getattr(vae.config, "shift_factor", None) or 0.0
        return latents / vae.config.scaling_factor + shift

    def latents_from_encoder(self, vae, encoded: torch.Tensor) -> torch.Tensor:
        """The denoiser's latents for what ``vae.encode`` gave: the inverse of :meth:`decoder_input`."""
        shift = getattr(vae.config, "shift_factor", None) or 0.0
        return (encoded - shift) * vae.config.scaling_factor

    def latent_channels(self, denoiser_config: Mapping) -> int:
        """Channels of the VAE latents the denoiser reads (its ``in_channels`` unless it packs them)."""
        return denoiser_config["in_channels"]

    def image_tokens(self, pipe, resolution: int) -> int:
        """The denoiser's image tokens at ``resolution`` (a dynamically shifted grid depends on them)."""
        _, height, width = self.latent_shape(pipe, resolution)
        return height * width

    def sigmas(self, scheduler, steps: int, image_tokens: int):
        """The flow grid's sigmas for ``steps`` steps (length steps + 1, ending at 0), fp32 on the CPU."""
        raise FamilyError(f"model.family {self.name} is not a rectified-flow family: it has no sigma grid")

    # The denoiser ----------------------------------------------------------------------------------
    def unconditional(self, pipe) -> dict:
        """The conditioning classifier-free guidance pairs with the prompts' ({key: [1, ...]}): what the family's
        pipeline uses when given no negative prompt: the encoding of ``negative_prompt`` (the empty prompt unless
        the family says otherwise). (Not ``train.proportion_empty_prompts``' dropout, which trains on the empty
        prompt's encoding: cache key ``empty_prompt/``.)"""
        return self.encode(pipe, [self.negative_prompt])

    @property
    def unconditional_key(self) -> str:
        """Where a rollout's cache holds :meth:`unconditional`'s conditioning (``<key>/<conditioning key>``)."""
        return NEGATIVE_PROMPT if self.negative_prompt else EMPTY_PROMPT

    def predict(self, denoiser, latents: torch.Tensor, timestep, cond: Mapping[str, torch.Tensor], *,
                guidance_scale: float = 1.0, uncond: Mapping[str, torch.Tensor] | None = None, dtype=None,
                pixel_size: int | None = None) -> torch.Tensor:
        """The denoiser's (guided) prediction at ``latents`` [B, C, h, w], in fp32.

        ``timestep``: a scalar or [B] in the scheduler's units (a DDPM timestep; sigma x
        num_train_timesteps on a flow grid). ``cond`` / ``uncond``: conditioning rows [B, ...] (the
        unconditional ones only where ``guidance`` is "cfg" and ``guidance_scale`` > 1). ``dtype``:
        what the inputs are cast to (default the denoiser's; pass it for a DDP-wrapped module).
        ``pixel_size``: the image size, for families whose denoiser is conditioned on it (SDXL).
        """
        raise NotImplementedError


FAMILIES: dict[str, ModelFamily] = {}


def register_family(cls: type[ModelFamily]) -> type[ModelFamily]:
    """Class decorator: register a family adapter under its ``name`` (``model.family``)."""
    if cls.name in FAMILIES:
        raise ValueError(f"model family {cls.name!r} registered twice")
    FAMILIES[cls.name] = cls()
    return cls


def get_family(name: str) -> ModelFamily:
    if name not in FAMILIES:
        raise FamilyError(f"model.family: unknown family {name!r} (expected one of {', '.join(FAMILIES)})")
    return FAMILIES[name]


def family_names(flow_matching: bool | None = None) -> list[str]:
    """The registered families (in registry order), or those of one kind."""
    return [n for n, f in FAMILIES.items() if flow_matching is None or f.flow_matching == flow_matching]


def cfg_batch(latents: torch.Tensor, timestep: torch.Tensor, cond: Mapping, uncond: Mapping | None,
              guidance_scale: float):
    """(latents, timesteps, conditioning) of the denoiser's pass: doubled, unconditional rows first, under
    classifier-free guidance; else as given. ``combine`` turns the pass's output into the guided one."""
    import torch

    if uncond is None or guidance_scale <= 1.0:
        return latents, timestep, dict(cond)
    both = {k: torch.cat([uncond[k].expand_as(v), v]) for k, v in cond.items()}
    return torch.cat([latents, latents]), torch.cat([timestep, timestep]), both


def combine(out: torch.Tensor, batch: int, guidance_scale: float) -> torch.Tensor:
    """The guided prediction from a (possibly doubled) pass's fp32 output."""
    if len(out) == batch:
        return out
    uncond, text = out.chunk(2)
    return uncond + guidance_scale * (text - uncond)


def batch_timesteps(timestep, latents: torch.Tensor) -> torch.Tensor:
    """``timestep`` (a scalar or [B]) as [B] on the latents' device: a float one in fp32, an integer one (DDPM)
    kept integer."""
    import torch

    value = torch.as_tensor(timestep, device=latents.device)
    if value.is_floating_point():
        value = value.to(torch.float32)
    return value.reshape(-1).expand(len(latents))

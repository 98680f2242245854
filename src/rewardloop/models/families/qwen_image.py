"""Qwen-Image: a Qwen2.5-VL text encoder behind a chat template, an MMDiT on 2x2-packed 16-channel latents of a
video VAE, rectified flow with true classifier-free guidance.

Everything follows diffusers' ``QwenImagePipeline`` (diffusers/pipelines/qwenimage/pipeline_qwenimage.py, line
numbers of diffusers 0.42.1):

* conditioning: ``encode_prompt`` (L235): the prompt in the chat template (``prompt_template_encode``, L187), the
  text encoder's last hidden states with the template's first 34 tokens dropped (L204-L230), at most 512 of
  them (``max_sequence_length``), with ``prompt_embeds_mask`` saying which rows are text. No pooled embedding.
  The pipeline pads to the longest prompt of its batch; here every encoding is padded to the 512 rows (zeros,
  masked), so that every prompt's conditioning has one shape, whatever it was encoded with (the negative
  prompt, the empty prompt of ``train.proportion_empty_prompts``, offline pairs, another iteration), as
  FLUX.1's T5 states always have 512. Masked rows are left out of the attention, so the prediction is the
  pipeline's to rounding (tests/unit/models/test_qwen_image_family.py); the cost is attention over 512 text
  tokens where the pipeline's batch may have fewer;
* the latents: the transformer reads 2x2 patches packed into tokens (``_pack_latents`` L335, the same as
  FLUX.1's), with ``img_shapes`` [(1, h/2, w/2)] per sample for its rotary positions (L566), the timestep
  cast to the latents' dtype and divided by 1000 (L617, L623);
* the grid: linspace(1, 1/N, N) shifted by mu from the image's token count (L572-L587), through the scheduler
  (Qwen-Image's has dynamic shifting, ``shift_terminal`` and an exponential time shift);
* guidance: "true CFG", a second pass on the negative prompt's own encoding (its length is its own, so the
  two passes are not batched), then the combination rescaled to the conditional prediction's norm per token
  (L646-L650). With no negative prompt the pipeline does no CFG; Qwen-Image's model card passes " ", which is
  the family's ``negative_prompt`` (cached beside the rollout's conditioning, ``negative_prompt/``);
* decoding: the VAE is a video VAE: latents get a frame axis, are denormalised per channel by the config's
  ``latents_mean`` / ``latents_std`` (not a scaling factor) and the first frame is decoded (L690-L702).

Latents stay unpacked [B, 16, h, w] outside :meth:`QwenImage.predict`, as the samplers expect. The CFG
rescale is computed in fp32 here where the pipeline computes it in the latents' dtype: equal in fp32, within
bf16's rounding otherwise.
"""

from __future__ import annotations

from rewardloop.models.families.base import batch_timesteps, register_family
from rewardloop.models.families.flux import PackedLatentFamily, pack_latents, unpack_latents

# QwenImagePipeline.__call__'s max_sequence_length default (L463): the text tokens after the template's.
QWEN_TEXT_TOKENS = 512


@register_family
class QwenImage(PackedLatentFamily):
    name = "qwen_image"
    pipeline = "QwenImagePipeline"
    denoiser = "transformer"
    text_encoders = ("text_encoder",)  # Qwen2.5-VL-7B-Instruct (its vision tower is loaded, never used)
    conditioning = ("prompt_embeds", "prompt_embeds_mask")
    negative_prompt = " "  # Qwen-Image's model card (the pipeline does true CFG only when given a negative prompt)
    default_resolution = 1328  # the model card's 1:1 size (1328 x 1328)
    flow_matching = True
    packing = "Qwen-Image's 2x2 latent packing"
    lora_key_format = "peft"
    # verl-omni's Qwen-Image Flow-GRPO LoRA (r 64, alpha 128): the joint blocks' image and text attention
    # projections and both MLPs.
    lora_targets = (
        "to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
        "img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj", "txt_mlp.net.2",
    )
    sequence_lengths = {"tokenizer": QWEN_TEXT_TOKENS}
    # As SD3 and FLUX.1: flow_grpo config/dpo.py's beta 100 for a flow model's DPO on the velocity MSE.
    defaults = {"train.dpo.beta": 100}
    capabilities = frozenset({"recorded_steps"})  # flow SDE / CPS steps

    def _encode(self, pipe, prompts):
        import torch

        embeds, mask = pipe.encode_prompt(prompt=prompts, device=pipe.device, max_sequence_length=QWEN_TEXT_TOKENS)
        if mask is None:  # every row is text (the pipeline's None)
            mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device)
        padding = QWEN_TEXT_TOKENS - embeds.shape[1]
        return {"prompt_embeds": torch.nn.functional.pad(embeds, (0, 0, 0, padding)),
                "prompt_embeds_mask": torch.nn.functional.pad(mask, (0, padding))}

    def resolution_factor(self, vae_config, denoiser_config):
        factor = 2 ** len(vae_config.get("temperal_downsample", [False, True, True]))
        return factor * 2, f"the VAE's factor {factor} x {self.packing}"

    # The video VAE: a frame axis, per-channel mean and std -------------------------------------------
    def decoder_input(self, vae, latents):
        mean, std = _latent_statistics(vae, latents)
        return latents[:, :, None] / (1.0 / std) + mean  # as L697-L701, in the same order

    def latents_from_encoder(self, vae, encoded):
        mean, std = _latent_statistics(vae, encoded)
        return ((encoded - mean) * (1.0 / std))[:, :, 0]

    def decode_latents(self, vae, latents):
        return vae.decode(self.decoder_input(vae, latents)).sample[:, :, 0]

    def encode_pixels(self, vae, pixels, generator=None):
        return self.latents_from_encoder(vae, vae.encode(pixels[:, :, None]).latent_dist.sample(generator=generator))

    def predict(self, denoiser, latents, timestep, cond, *, guidance_scale=1.0, uncond=None, dtype=None,
                pixel_size=None):
        import torch

        dtype = dtype or denoiser.dtype
        batch, _, height, width = latents.shape
        t = batch_timesteps(timestep, latents).to(dtype) / 1000
        tokens = pack_latents(latents).to(dtype)
        shapes = [[(1, height // 2, width // 2)]] * batch

        def velocity(rows):
            mask = rows["prompt_embeds_mask"].to(latents.device).bool()
            return denoiser(hidden_states=tokens, timestep=t, encoder_hidden_states=rows["prompt_embeds"].to(dtype),
                            encoder_hidden_states_mask=None if mask.all() else mask, img_shapes=shapes,
                            return_dict=False)[0].float()

        out = velocity(cond)
        if uncond is not None and guidance_scale > 1.0:
            negative = velocity({k: v.expand(batch, *v.shape[1:]) for k, v in uncond.items()})
            combined = negative + guidance_scale * (out - negative)
            out = combined * (torch.norm(out, dim=-1, keepdim=True) / torch.norm(combined, dim=-1, keepdim=True))
        return unpack_latents(out, height, width)


def _latent_statistics(vae, like):
    import torch

    shape = (1, vae.config.z_dim, 1, 1, 1)
    mean = torch.tensor(vae.config.latents_mean).view(shape).to(like.device, like.dtype)
    std = torch.tensor(vae.config.latents_std).view(shape).to(like.device, like.dtype)
    return mean, std

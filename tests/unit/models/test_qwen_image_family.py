"""Qwen-Image on its published-layout replica: our sampler gives QwenImagePipeline's image (its prompt template,
true CFG against " " with the norm rescale, the shifted grid, the video VAE's per-channel denormalisation), and
an exported LoRA loads whole into QwenImagePipeline.load_lora_weights and gives the same image as ours."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rewardloop.models import loading as models
from rewardloop.models.families import get_family
from rewardloop.models.families.flux import pack_latents, unpack_latents
from rewardloop.models.replicas import build_replica
from rewardloop.sampling.ddim import SamplerSettings
from rewardloop.sampling.flow import sample_flow

from test_lora_roundtrip import assert_fused, trained_lora

PROMPTS, SEEDS, STEPS = ["a red circle", "a green square on a blue background, seen from above"], [3, 11], 3
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen") / "qwen_image"
    build_replica("qwen_image", folder)
    return folder


def images_both_ways(pipe, scale: float):
    """(ours: final latents [B, 16, h, w] and eval's uint8 images, the pipeline's: the same two) for PROMPTS and
    SEEDS at 64 px; the pipeline gets our seeds' noise (packed) and the model card's negative prompt " "."""
    family = get_family("qwen_image")
    settings = SamplerSettings(steps=STEPS, guidance_scale=scale, eta=0.0, resolution=64)
    latents, _ = sample_flow(pipe, family, family.encode(pipe, PROMPTS), SEEDS, settings, batch_size=2, progress=False)
    ours = np.stack([np.asarray(image) for image in family.decode_images(pipe, latents, 2)])
    noise = torch.stack([torch.randn(family.latent_shape(pipe, 64), generator=torch.Generator().manual_seed(seed))
                         for seed in SEEDS])
    call = dict(height=64, width=64, num_inference_steps=STEPS, latents=pack_latents(noise), negative_prompt=" ",
                true_cfg_scale=scale)
    theirs_latents = unpack_latents(pipe(PROMPTS, output_type="latent", **call).images, *latents.shape[-2:])
    theirs = np.round(pipe(PROMPTS, output_type="np", **call).images * 255).astype(np.uint8)
    return (latents, ours), (theirs_latents, theirs)


@torch.no_grad()
@pytest.mark.parametrize("scale", [1.0, 4.0], ids=["no-cfg", "true-cfg-4"])
def test_our_sampler_gives_the_pipelines_image(replica, scale):
    """fp32, 3 steps: the same latents to rounding and the same PNG pixels. At 4 the negative prompt's pass and
    the rescale are in both. The pipeline pads the two prompts to the longer one, ours to 512 rows: masked rows
    change nothing but rounding."""
    pipe = models.load_pipeline({"family": "qwen_image", "path": str(replica)})
    pipe.set_progress_bar_config(disable=True)
    (ours_latents, ours), (theirs_latents, theirs) = images_both_ways(pipe, scale)
    torch.testing.assert_close(ours_latents, theirs_latents.float(), atol=1e-5, rtol=0)
    assert np.abs(ours.astype(int) - theirs.astype(int)).max() <= 1
    mask = get_family("qwen_image").encode(pipe, PROMPTS)["prompt_embeds_mask"]
    assert mask.shape[1] == 512 and len(set(mask.sum(1).tolist())) == 2  # two text lengths, both padded to 512


@torch.no_grad()
def test_true_cfg_guides_against_the_negative_prompt_and_keeps_the_conditional_norm(replica):
    """predict at scale 4 is the pipeline's formula on the two passes: neg + 4 (cond - neg), rescaled per token to
    the conditional prediction's norm; the negative prompt is " " (cached as negative_prompt/, not the empty one)."""
    family = get_family("qwen_image")
    pipe = models.load_pipeline({"family": "qwen_image", "path": str(replica)})
    assert family.unconditional_key == "negative_prompt" and family.negative_prompt == " "
    cond, uncond = family.encode(pipe, PROMPTS[:1]), family.unconditional(pipe)
    latents = torch.randn(1, *family.latent_shape(pipe, 64), generator=torch.Generator().manual_seed(0))
    t = torch.tensor([700.0])
    guided = family.predict(pipe.transformer, latents, t, cond, guidance_scale=4.0, uncond=uncond)
    positive = pack_latents(family.predict(pipe.transformer, latents, t, cond))
    negative = pack_latents(family.predict(pipe.transformer, latents, t, uncond))
    combined = negative + 4.0 * (positive - negative)
    expected = combined * positive.norm(dim=-1, keepdim=True) / combined.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(pack_latents(guided), expected, atol=1e-6, rtol=1e-5)
    assert (positive - negative).abs().max() > 1e-3  # the two passes differ: the guidance is not a no-op


@torch.no_grad()
def test_a_qwen_image_lora_loads_whole_in_the_pipeline_and_gives_our_image(replica, tmp_path):
    """save_lora on Qwen-Image's targets (verl-omni's: image and text attention projections, both MLPs) keeps
    peft's names under transformer.; every layer lands fused in ours and in QwenImagePipeline.load_lora_weights,
    and the images agree (eval's PNG pixels within 1 of the pipeline's, unfused there, fused here)."""
    from safetensors import safe_open

    spec = get_family("qwen_image")
    deltas = trained_lora(replica, "qwen_image", list(spec.lora_targets), tmp_path / "lora")
    for target in spec.lora_targets:
        assert any(n.endswith(target) for n in deltas), target
    with safe_open(str(tmp_path / "lora" / models.LORA_WEIGHTS), framework="pt") as handle:
        assert all(k.startswith("transformer.") and (".lora_A." in k or ".lora_B." in k) for k in handle.keys())
    base = models.load_pipeline({"family": "qwen_image", "path": str(replica)})
    ours = models.load_pipeline({"family": "qwen_image", "path": str(replica)}, lora_dir=str(tmp_path / "lora"))
    assert_fused(ours.transformer, base.transformer, deltas)
    plain = spec.pipeline_class().from_pretrained(str(replica), dtype=torch.float32)
    plain.set_progress_bar_config(disable=True)
    plain.load_lora_weights(str(tmp_path / "lora"))
    assert {n for n, m in plain.transformer.named_modules() if getattr(m, "lora_A", None)} == set(deltas)
    (lora_latents, with_lora), (plain_latents, plain_image) = images_both_ways(ours, 4.0)[0], images_both_ways(plain, 4.0)[1]
    (base_latents, _), _ = images_both_ways(base, 4.0)
    assert (lora_latents - base_latents).abs().max() > 0.05  # the LoRA changes the sample
    torch.testing.assert_close(lora_latents, plain_latents.float(), atol=5e-4, rtol=0)
    assert np.abs(with_lora.astype(int) - plain_image.astype(int)).max() <= 1

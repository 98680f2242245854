"""Precision as used on GPUs, run on the CPU: fp16 with a force_upcast VAE, bf16 rollouts; training
loads no text encoder."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from rewardloop.config import load
from rewardloop.models import loading as models
from rewardloop.models.families import get_family
from rewardloop.sampling.ddim import SamplerSettings
from rewardloop.stages.common import SDEPlan, rollout
from rewardloop.stages.train import load_models

from workflow_helpers import ROOT

PROMPTS = pd.DataFrame({"prompt_id": ["p0", "p1"],
                        "prompt": ["a red circle on a blue background", "a green square on a yellow background"]})


def with_vae_config(model_dir, tmp_path, **changes):
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    config_file = copy / "vae/config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), **changes}))
    return copy


@torch.no_grad()
@pytest.mark.parametrize("force_upcast", [True, False])
def test_fp16_pipeline_decodes_in_fp32_when_the_vae_says_so(tiny_model, tmp_path, force_upcast):
    """SDXL's VAE overflows in fp16 (NaN, black images): its config's force_upcast makes it decode in fp32."""
    folder = with_vae_config(tiny_model, tmp_path, force_upcast=force_upcast)
    latents = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    sd15 = get_family("sd15")
    reference = sd15.decode_images(models.load_pipeline({"family": "sd15", "path": str(folder)}), latents, 2)
    half = models.load_pipeline({"family": "sd15", "path": str(folder)}, dtype=torch.float16)
    images = sd15.decode_images(half, latents, 2)
    assert half.vae.dtype == (torch.float32 if force_upcast else torch.float16)
    assert half.unet.dtype == torch.float16
    difference = max(np.abs(np.asarray(a, dtype=int) - np.asarray(b, dtype=int)).max() for a, b in zip(images, reference))
    assert difference <= (2 if force_upcast else 255)  # fp16-rounded weights, fp32 arithmetic


@torch.no_grad()
def test_bf16_rollouts_keep_latents_records_and_embeddings_in_fp32(tiny_sd3_model):
    """generate.precision bf16 (SD3.5's recipes): the transformer and text encoders run in bf16; what is
    cached for training (conditioning, recorded steps, log-probs) stays fp32."""
    settings = SamplerSettings(steps=4, guidance_scale=4.5, eta=0.0, resolution=32)
    sde = SDEPlan(0.7, [[0, 1], [1, 2], [2, 3], [0, 3]], "flow_grpo")
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        pipe = models.load_pipeline({"family": "sd3", "path": str(tiny_sd3_model)}, dtype=dtype)
        assert pipe.transformer.dtype == dtype and pipe.text_encoder.dtype == dtype
        results[dtype] = rollout(pipe, get_family("sd3"), PROMPTS, [[1, 2], [3, 4]], settings, 4, "t",
                                 progress=False, sde=sde)
    (_, full, full_tensors), (_, half, half_tensors) = results[torch.float32], results[torch.bfloat16]
    assert half.dtype == torch.float32 and torch.isfinite(half).all()
    assert all(half_tensors[k].dtype == torch.float32 for k in half_tensors
               if k not in ("rollout/guidance_scale", "rollout/sde_type"))
    # bf16 is a coarser version of the same computation, not another one
    assert (half - full).abs().mean() < 0.25 * full.abs().mean()
    assert not torch.equal(half, full)


def test_training_loads_the_denoiser_without_text_encoders(tiny_sd3_model, tiny_model):
    for family, folder, denoiser in (("sd3", tiny_sd3_model, "transformer"), ("sd15", tiny_model, "unet")):
        pipe, reference = load_models({"family": family, "path": str(folder)}, "lora", None, None, "cpu")
        assert getattr(pipe, denoiser) is not None and reference is None
        assert all(getattr(pipe, name, None) is None for name in get_family(family).text_encoders), family


def test_generate_precision_follows_train_mixed_precision():
    tiny = {"model": {"build_tiny": True}}
    assert load(ROOT / "config.yaml", tiny)["generate"]["precision"] == "fp32"
    mixed = load(ROOT / "config.yaml", {**tiny, "train": {"mixed_precision": "bf16"}})
    assert mixed["generate"]["precision"] == "bf16"
    chosen = load(ROOT / "config.yaml", {**tiny, "train": {"mixed_precision": "bf16"},
                                         "generate": {"precision": "fp32"}})
    assert chosen["generate"]["precision"] == "fp32"

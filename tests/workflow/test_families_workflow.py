"""Each model family, and full fine-tuning with offline pairs, through real tiny iterations of the workflow."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from model_helpers import outputs_before_and_after_lora
from workflow_helpers import snakemake, tiny_overlay, write_overlay

from training_inputs import write_pickapic

pytestmark = pytest.mark.workflow


def test_sdxl_one_iteration_and_its_lora_loads_in_plain_diffusers(tmp_path, tiny_sdxl_model):
    from diffusers import StableDiffusionXLPipeline

    overlay = tiny_overlay(tiny_sdxl_model, iterations=1, model={"family": "sdxl"}, tracking={"enabled": False},
                           train={"proportion_empty_prompts": 0.2, "hflip": True})
    write_overlay(tmp_path, overlay)
    snakemake(tmp_path, "results/iter_000/eval.parquet")  # train, export, then sample with the LoRA fused
    cache = load_file(tmp_path / "results/iter_000/latents.safetensors")
    assert any(k.startswith("pooled_embeds/") for k in cache) and "empty_prompt/pooled_embeds" in cache
    before, after = outputs_before_and_after_lora(StableDiffusionXLPipeline.from_pretrained(tiny_sdxl_model),
                                                  tmp_path / "results/iter_000/checkpoint",
                                                  num_inference_steps=2, output_type="latent")
    assert after.shape == before.shape and (after - before).abs().max() > 0


def test_full_finetune_with_offline_pairs_one_iteration(tmp_path, tiny_model):
    import json

    from diffusers import StableDiffusionPipeline

    write_pickapic(tmp_path / "pickapic.parquet")
    overlay = tiny_overlay(tiny_model, iterations=1, tracking={"enabled": False},
                           train={"adapter": "none", "dpo": {"reference": "base"}, "learning_rate": 1e-4,
                                  "optimizer": "adafactor"},
                           data={"offline_pairs": str(tmp_path / "pickapic.parquet"), "offline_fraction": 0.25})
    write_overlay(tmp_path, overlay)
    result = snakemake(tmp_path, "results/iter_000/checkpoint/model_index.json")
    assert result.stderr.count("rule encode_offline_pairs") == 1
    checkpoint = tmp_path / "results/iter_000/checkpoint"
    assert not (checkpoint / "pytorch_lora_weights.safetensors").exists()
    final = StableDiffusionPipeline.from_pretrained(checkpoint)  # a plain diffusers folder
    base = StableDiffusionPipeline.from_pretrained(tiny_model)
    moved = [(a - b).abs().max().item() for a, b in zip(final.unet.parameters(), base.unet.parameters())]
    assert max(moved) > 0
    for a, b in zip(final.text_encoder.parameters(), base.text_encoder.parameters()):
        assert torch.equal(a, b)  # only the UNet trains
    train_metrics = json.loads((tmp_path / "results/iter_000/metrics/train.json").read_text())
    assert train_metrics["offline_pairs"] == 5
    # Iteration 1 samples from the full folder: the DAG chains on its model_index.json, and the
    # offline pairs are not encoded again.
    plan = snakemake(tmp_path, "-n", "results/iter_001/checkpoint/model_index.json", "--config", "iterations=2")
    assert "encode_offline_pairs" not in plan.stdout + plan.stderr
    assert "rule generate" in plan.stdout + plan.stderr

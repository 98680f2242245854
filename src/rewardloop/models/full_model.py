"""Full fine-tuning's files (train.adapter none): the trained UNet, and model(it) as a full diffusers folder.

The train job writes ``train/unet/`` (config + safetensors); export writes ``checkpoint/`` as a
complete pipeline folder (the trained UNet with model(it-1)'s other components) that a plain
``DiffusionPipeline.from_pretrained(dir)`` loads. Both are written in a temporary folder and
renamed into place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from rewardloop.models import loading as models
from rewardloop.artifacts import atomic_dir


def save_unet(unet, out_dir) -> Path:
    """Write ``out_dir/unet/`` (safetensors) atomically; return the weights file."""
    with atomic_dir(Path(out_dir) / "unet") as tmp:
        unet.save_pretrained(tmp, safe_serialization=True)
    return Path(out_dir) / models.FULL_UNET_WEIGHTS


def export_pipeline(model_cfg: Mapping, previous_dir, trained_dir, out_dir) -> None:
    """Save model(it): model(it-1)'s pipeline (``previous_dir``, or the base) with the trained UNet."""
    from diffusers import UNet2DConditionModel

    pipe = models.load_pipeline(model_cfg, lora_dir=previous_dir)
    pipe.unet = UNet2DConditionModel.from_pretrained(Path(trained_dir) / "unet")
    with atomic_dir(out_dir) as tmp:
        pipe.save_pretrained(tmp, safe_serialization=True)

"""export: publish the iteration's trained weights as model(it), checked, in the diffusers layout.

LoRA (``train.adapter: lora``): the checkpoint folder holds ``pytorch_lora_weights.safetensors``
(loadable by a plain diffusers ``pipe.load_lora_weights(dir)``) and ``adapter_info.json``; with
``export.merged`` also a full pipeline with the LoRA fused in (``merged/``). Full fine-tuning
(``adapter: none``): the checkpoint folder is itself a full diffusers pipeline (safetensors).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from rewardloop.models import loading as models
from rewardloop.artifacts import atomic_dir, atomic_path, read_tensors, write_json


class ExportError(RuntimeError):
    pass


def _check_finite(source: Path, iteration: int) -> dict:
    tensors = read_tensors(source, numpy=True)
    if not tensors:
        raise ExportError(f"{source}: holds no tensors")
    broken = [k for k, v in tensors.items() if not np.isfinite(v).all()]
    if broken:
        raise ExportError(f"{source}: non-finite values in {broken[:3]}; refusing to export iteration {iteration}")
    return tensors


def run(cfg, iteration: int, trained_dir, checkpoint_dir, metrics_path=None, previous_dir=None):
    """cfg: model, export, train (``train.adapter``, absent = lora; ``train.extra_adapters``, weight sets
    beside the LoRA that model(it) keeps in subfolders).

    ``previous_dir``: model(it-1)'s folder, whose components a fully fine-tuned UNet joins.
    """
    adapter = cfg.get("train", {}).get("adapter", "lora")
    checkpoint_dir = Path(checkpoint_dir)
    source = Path(trained_dir) / models.trained_file(adapter)
    tensors = _check_finite(source, iteration)
    if adapter == "none":
        from rewardloop.models.full_model import export_pipeline

        export_pipeline(cfg["model"], previous_dir, trained_dir, checkpoint_dir)
    else:
        if cfg["export"]["merged"]:
            _export_merged(cfg["model"], trained_dir, checkpoint_dir / "merged")
        # Weight sets the objective keeps beside the LoRA (NFT's old policy) first: the LoRA marks model(it) done.
        for name in cfg.get("train", {}).get("extra_adapters", []):
            extra = Path(trained_dir) / name / models.LORA_WEIGHTS
            _check_finite(extra, iteration)
            with atomic_path(checkpoint_dir / name / models.LORA_WEIGHTS) as tmp:
                shutil.copyfile(extra, tmp)
        with atomic_path(checkpoint_dir / models.LORA_WEIGHTS) as tmp:
            shutil.copyfile(source, tmp)
    info = {
        "iteration": iteration,
        "base_model": models.model_reference(cfg["model"]),  # where the input link points, and its identity
        "family": cfg["model"]["family"],
        "adapter": adapter,
        "tensors": len(tensors),
        "parameters": int(sum(v.size for v in tensors.values())),
    }
    write_json(info, checkpoint_dir / "adapter_info.json")
    if metrics_path:
        key = "export/lora_parameters" if adapter == "lora" else "export/unet_parameters"
        write_json({"iteration": iteration, key: info["parameters"]}, metrics_path)


def _export_merged(model_cfg, lora_dir, out_dir: Path) -> None:
    pipe = models.load_pipeline(model_cfg, lora_dir=str(lora_dir))
    with atomic_dir(out_dir) as tmp:
        pipe.save_pretrained(tmp, safe_serialization=True)

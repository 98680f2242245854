"""export: publish the iteration's LoRA as model(it), checked, in the diffusers layout.

The checkpoint folder holds ``pytorch_lora_weights.safetensors`` (loadable by a plain diffusers
``pipe.load_lora_weights(dir)``) and ``adapter_info.json``; with ``export.merged`` also a full
pipeline with the LoRA fused in (``merged/``).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from rewardloop import models
from rewardloop.artifacts import atomic_path, read_tensors, write_json


class ExportError(RuntimeError):
    pass


def run(cfg, iteration: int, trained_dir, checkpoint_dir, metrics_path=None):
    """cfg: model, export."""
    source = Path(trained_dir) / models.LORA_WEIGHTS
    tensors = read_tensors(source, numpy=True)
    if not tensors:
        raise ExportError(f"{source}: holds no LoRA tensors")
    broken = [k for k, v in tensors.items() if not np.isfinite(v).all()]
    if broken:
        raise ExportError(f"{source}: non-finite values in {broken[:3]}; refusing to export iteration {iteration}")
    checkpoint_dir = Path(checkpoint_dir)
    if cfg["export"]["merged"]:
        _export_merged(cfg["model"], trained_dir, checkpoint_dir / "merged")
    with atomic_path(checkpoint_dir / models.LORA_WEIGHTS) as tmp:
        shutil.copyfile(source, tmp)
    info = {
        "iteration": iteration,
        "base_model": cfg["model"]["path"],
        "family": cfg["model"]["family"],
        "tensors": len(tensors),
        "parameters": int(sum(v.size for v in tensors.values())),
    }
    write_json(info, checkpoint_dir / "adapter_info.json")
    if metrics_path:
        write_json({"iteration": iteration, "export/lora_parameters": info["parameters"]}, metrics_path)


def _export_merged(model_cfg, lora_dir, out_dir: Path) -> None:
    pipe = models.load_pipeline(model_cfg, lora_dir=str(lora_dir))
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-merged-", dir=out_dir.parent))
    try:
        pipe.save_pretrained(tmp, safe_serialization=True)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

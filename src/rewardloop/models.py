"""Load model families (a local diffusers folder or a hub id) and their LoRA adapters.

The embedded tiny model and a real SD1.5 checkpoint take the same path through this module.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Mapping

LORA_WEIGHTS = "pytorch_lora_weights.safetensors"
FULL_UNET_WEIGHTS = "unet/diffusion_pytorch_model.safetensors"
MODEL_INDEX = "model_index.json"


def trained_file(adapter: str) -> str:
    """The file a train job writes (relative to its folder): the LoRA, or the full UNet (train.adapter none)."""
    return LORA_WEIGHTS if adapter == "lora" else FULL_UNET_WEIGHTS


def checkpoint_file(adapter: str) -> str:
    """The file marking an exported model(it): the LoRA, or a full diffusers folder's model_index.json."""
    return LORA_WEIGHTS if adapter == "lora" else MODEL_INDEX


def is_full_model(folder) -> bool:
    return folder is not None and (Path(folder) / MODEL_INDEX).is_file()
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class ModelError(ValueError):
    pass


def is_hub_id(path: str) -> bool:
    return bool(_HUB_ID.match(path)) and not Path(path).exists()


def check_model_reference(model_cfg: Mapping) -> None:
    """Fail early, naming ``model.path``, when the base model cannot be found."""
    path = model_cfg["path"]
    if model_cfg.get("build_tiny"):
        return  # a rule builds it
    if is_hub_id(path):
        return  # resolved by from_pretrained (needs the network or the hub cache)
    folder = Path(path)
    if not folder.is_dir():
        raise ModelError(f"model.path: {path} is not a folder (expected a diffusers model folder or a hub id)")
    if not (folder / "model_index.json").is_file():
        raise ModelError(f"model.path: {path} has no model_index.json (not a diffusers pipeline folder)")
    init_lora = model_cfg.get("init_lora")
    if init_lora and not (Path(init_lora) / LORA_WEIGHTS).is_file():
        raise ModelError(f"model.init_lora: {init_lora} has no {LORA_WEIGHTS}")


def needs_hf_token(model_cfg: Mapping) -> bool:
    """SD3/SD3.5 on the hub are gated: downloading them needs HF_TOKEN (passed through, never stored)."""
    return model_cfg["family"] == "sd3" and not model_cfg.get("build_tiny") and is_hub_id(str(model_cfg["path"]))


def model_reference(model_cfg: Mapping, lora_dir: str | None = None) -> str:
    """How artifacts and tracking name a model: the base path, plus the LoRA folder applied to it."""
    return str(model_cfg["path"]) + (f" + {lora_dir}" if lora_dir else "")


def pipeline_class(family: str):
    from rewardloop.families import FamilyError, get_family

    try:
        return get_family(family).pipeline_class()
    except FamilyError as exc:
        raise ModelError(str(exc)) from exc


def absent_components(path: str) -> dict:
    """{name: None} for components a local folder's model_index.json lists as [null, null].

    diffusers refuses to load such a folder (e.g. an SD3 model without T5) unless they are passed
    explicitly as None.
    """
    index = Path(path) / "model_index.json"
    if not index.is_file():
        return {}
    entries = json.loads(index.read_text())
    return {k: None for k, v in entries.items() if isinstance(v, list) and v == [None, None]}


def denoiser_name(family: str) -> str:
    """The pipeline attribute (and LoRA key prefix) of the family's denoiser."""
    from rewardloop.families import get_family

    return get_family(family).denoiser


def resolve_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_pipeline(model_cfg: Mapping, lora_dir: str | None = None, device="cpu", dtype=None):
    """Load the base pipeline; with ``lora_dir``, load that LoRA and fuse it into the weights.

    Fusing makes sampling from a trained iteration exactly as fast as sampling from the base.
    A ``lora_dir`` holding a full diffusers folder (a fully fine-tuned model(it), train.adapter
    none) is loaded instead of the base.
    """
    import torch

    from rewardloop.families import get_family

    source = model_cfg["path"]
    if is_full_model(lora_dir):
        source, lora_dir = str(lora_dir), None
    cls = pipeline_class(model_cfg["family"])
    try:
        pipe = cls.from_pretrained(
            source,
            dtype=dtype or torch.float32,
            **{**absent_components(source), **get_family(model_cfg["family"]).load_kwargs()},
        )
    except (OSError, ValueError) as exc:
        raise ModelError(f"model.path: cannot load {source} as {cls.__name__} ({exc})") from exc
    if lora_dir:
        load_lora_fused(pipe, lora_dir)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)


def load_lora_fused(pipe, lora_dir: str) -> None:
    weights = Path(lora_dir) / LORA_WEIGHTS
    if not weights.is_file():
        raise ModelError(f"{weights}: LoRA weights not found")
    try:
        pipe.load_lora_weights(str(lora_dir), weight_name=LORA_WEIGHTS, adapter_name="rewardloop")
    except Exception as exc:
        raise ModelError(f"{weights}: does not fit model {pipe.name_or_path} ({exc})") from exc
    pipe.fuse_lora(adapter_names=["rewardloop"])
    pipe.unload_lora_weights()

"""The file names of model folders and checkpoints, and a safetensors header reader, shared by the
modules of the models wing (loading, lora, layout) without importing one another."""

from __future__ import annotations

import json
from pathlib import Path

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


class ModelError(ValueError):
    pass


def tensor_shapes(path) -> dict[str, list[int]]:
    """``{name: shape}`` from a safetensors file's header, without reading (or unpickling) any tensor."""
    try:
        with open(path, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            if not 0 < size <= 100_000_000:
                raise ValueError(f"header size {size}")
            header = json.loads(fh.read(size))
        return {name: list(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ModelError(f"{path}: not a readable safetensors file ({exc})") from exc

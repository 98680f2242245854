"""LoRA adapters on the denoiser: attach (peft), load from and save to the diffusers format.

The saved file is ``pytorch_lora_weights.safetensors`` in the layout that a plain diffusers
``pipe.load_lora_weights(dir)`` accepts, with the adapter config in its metadata so alpha != rank
survives the round trip.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Mapping

from rewardloop.artifacts import sort_safetensors_header
from rewardloop.models import LORA_WEIGHTS, ModelError, denoiser_name, pipeline_class


def lora_config(lora_cfg: Mapping):
    from peft import LoraConfig

    return LoraConfig(
        r=lora_cfg["rank"],
        lora_alpha=lora_cfg["alpha"],
        init_lora_weights="gaussian",
        target_modules=list(lora_cfg["targets"]),
    )


def attach_lora(unet, lora_cfg: Mapping) -> list:
    """Add a trainable adapter to ``unet`` (base weights frozen); return its parameters."""
    unet.requires_grad_(False)
    try:
        unet.add_adapter(lora_config(lora_cfg))
    except ValueError as exc:
        raise ModelError(f"train.lora.targets: {exc}") from exc
    return [p for p in unet.parameters() if p.requires_grad]


def load_lora_into(unet, family: str, lora_dir: str) -> None:
    """Copy a saved LoRA's weights into the adapter attached by :func:`attach_lora`."""
    from diffusers.utils import convert_unet_state_dict_to_peft
    from peft import set_peft_model_state_dict

    weights = Path(lora_dir) / LORA_WEIGHTS
    if not weights.is_file():
        raise ModelError(f"{weights}: LoRA weights not found")
    state = pipeline_class(family).lora_state_dict(str(lora_dir), weight_name=LORA_WEIGHTS)
    state = state[0] if isinstance(state, tuple) else state  # sd15 adds network alphas, sd3 does not
    prefix = denoiser_name(family) + "."
    unet_state = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
    try:
        result = set_peft_model_state_dict(unet, convert_unet_state_dict_to_peft(unet_state))
    except RuntimeError as exc:  # size mismatch: another rank or another architecture
        raise ModelError(f"{weights}: does not fit the adapter of this model (train.lora): {exc}") from exc
    unexpected = list(result.unexpected_keys)
    missing = [k for k in result.missing_keys if "lora_" in k]
    if unexpected or missing:
        raise ModelError(
            f"{weights}: does not fit the adapter of this model (train.lora): "
            f"unexpected {unexpected[:3]}, missing {missing[:3]}"
        )


def save_lora(unet, family: str, lora_cfg: Mapping, out_dir: str | os.PathLike) -> Path:
    """Write ``out_dir/pytorch_lora_weights.safetensors`` atomically."""
    from diffusers.utils import convert_state_dict_to_diffusers
    from peft.utils import get_peft_model_state_dict

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    layers = convert_state_dict_to_diffusers(get_peft_model_state_dict(unet))
    layers = {k: v.detach().float().cpu().contiguous() for k, v in layers.items()}
    adapter_metadata = lora_config(lora_cfg).to_dict()
    # peft keeps the targets as a set, whose order changes with Python's hash seed: sorted, two
    # runs write the same bytes.
    adapter_metadata["target_modules"] = sorted(adapter_metadata["target_modules"])
    with tempfile.TemporaryDirectory(prefix=".tmp-lora-", dir=out_dir) as tmp:
        denoiser = denoiser_name(family)
        pipeline_class(family).save_lora_weights(
            tmp,
            weight_name=LORA_WEIGHTS,
            **{f"{denoiser}_lora_layers": layers, f"{denoiser}_lora_adapter_metadata": adapter_metadata},
        )
        sort_safetensors_header(Path(tmp) / LORA_WEIGHTS)
        os.replace(Path(tmp) / LORA_WEIGHTS, out_dir / LORA_WEIGHTS)
    return out_dir / LORA_WEIGHTS

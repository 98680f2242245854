"""Load model families (a local diffusers folder or a hub id) and their LoRA adapters.

The embedded tiny model and a real SD1.5 checkpoint take the same path through this module.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Mapping

from rewardloop.models.files import (FULL_UNET_WEIGHTS, LORA_WEIGHTS, MODEL_INDEX, ModelError,  # noqa: F401
                                     checkpoint_file, is_full_model, tensor_shapes, trained_file)

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_hub_id(path: str) -> bool:
    return bool(_HUB_ID.match(path)) and not Path(path).exists()


def check_model_reference(model_cfg: Mapping) -> None:
    """Fail early, naming ``model.path``, when the base model cannot be found or cannot run (a folder of
    another family, a missing component, a scheduler the samplers cannot use: see models.layout).

    With ``build_tiny`` the path is where rule build_tiny_model writes: it must lie inside the
    working directory (the workflow writes nowhere else but results/).
    """
    path = model_cfg["path"]
    if model_cfg.get("build_tiny"):
        check_inside_workdir("model.path", path, "model.build_tiny writes the tiny model there")
        return  # a rule builds it
    if is_hub_id(path) and not _offline_and_uncached(path):
        return  # resolved by from_pretrained (needs the network or the hub cache)
    if not Path(path).is_dir():
        raise ModelError(f"model.path: {path} is not a folder (expected a diffusers model folder, or a hub id"
                         + (" in the local cache: HF_HUB_OFFLINE is set)" if is_hub_id(path) else ")"))
    from rewardloop.models.layout import check_model_folder

    check_model_folder(path, model_cfg.get("family", "sd15"), model_cfg.get("variant"))


def cached_snapshot(hub_id: str) -> str | None:
    """The local snapshot folder a hub id resolves to now (the revision ``refs/main`` names in the hub
    cache), or None when the model is not cached."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(hub_id, MODEL_INDEX)
    return str(Path(found).parent) if isinstance(found, str) else None


def _offline_and_uncached(hub_id: str) -> bool:
    """With HF_HUB_OFFLINE set, a hub id absent from the local cache cannot load: treat it as a folder."""
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE and cached_snapshot(hub_id) is None


def check_inside_workdir(key: str, path: str, why: str) -> None:
    """``path`` (a place the workflow writes) resolves inside the working directory."""
    cwd = Path.cwd().resolve()
    if not (cwd / path).resolve().is_relative_to(cwd):
        raise ModelError(f"{key}: {path} is outside the working directory {cwd} ({why}; use a relative "
                         "path without '..')")


def needs_hf_token(model_cfg: Mapping) -> bool:
    """Gated hub checkpoints (SD3/SD3.5, FLUX.1-dev) need HF_TOKEN to download (passed through, never stored)."""
    from rewardloop.models.families import get_family

    return get_family(model_cfg["family"]).gated and not model_cfg.get("build_tiny") and is_hub_id(str(model_cfg["path"]))


def model_reference(model_cfg: Mapping, lora_dir: str | None = None) -> str:
    """How artifacts and tracking name a model: the base path (for a job's input link, where it points and
    its content identity: host.input_links), plus the LoRA folder applied to it."""
    from rewardloop.host.input_links import described

    return described(model_cfg["path"]) + (f" + {lora_dir}" if lora_dir else "")


def pipeline_class(family: str):
    from rewardloop.models.families import FamilyError, get_family

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
    from rewardloop.models.families import get_family

    return get_family(family).denoiser


def resolve_device(name: str):
    """The torch device of the config's ``device`` on this host (``check_device`` first: a missing GPU is
    named, not met as a CUDA error in the middle of a stage)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    check_device(name)
    return torch.device(name)


def check_device(name: str) -> None:
    """``device`` (cpu, auto, mps, cuda, cuda:N) is present on this host; else a ModelError naming the key."""
    if name in ("auto", "cpu"):
        return
    import torch

    if name == "mps":
        if not torch.backends.mps.is_available():
            raise ModelError("device: mps, but this host has no MPS device (Apple silicon with a macOS build of "
                             "torch); set device: auto or cpu")
        return
    count = torch.cuda.device_count()
    index = int(name.split(":")[1]) if ":" in name else 0
    if index < count:
        return
    seen = _cuda_devices_seen(count)
    if count == 0:
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise ModelError(f"device: {name}, but torch {torch.__version__} ({build}) sees {seen} on this host; "
                         "set device: auto or cpu, or run where a GPU is")
    raise ModelError(f"device: {name}, but this host has {seen}: cuda:0 to cuda:{count - 1}")


def check_gpu_count(device: str, gpus: int, asked_by: str) -> None:
    """A job that starts one process per GPU (``gpus`` > 1 on ``device`` cuda) finds that many CUDA devices
    on this host; else a ModelError naming ``asked_by`` (the key or resource that asks) and what is seen."""
    if gpus <= 1 or not str(device).startswith("cuda"):
        return
    import torch

    count = torch.cuda.device_count()
    if count >= gpus:
        return
    raise ModelError(f"{asked_by} asks for {gpus} GPUs (one process each), but this host has "
                     f"{_cuda_devices_seen(count)}; "
                     "lower it, or ask the cluster for as many GPUs on the train job's node")


def _cuda_devices_seen(count: int) -> str:
    """What an error says of this host's CUDA devices: their count, and CUDA_VISIBLE_DEVICES when it is set."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f"{count} CUDA device(s)" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")


PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def torch_dtype(precision: str):
    """The torch dtype of ``generate.precision`` (fp32, fp16, bf16)."""
    import torch

    return getattr(torch, PRECISIONS[precision])


def load_pipeline(model_cfg: Mapping, lora_dir: str | None = None, device="cpu", dtype=None,
                  text_encoders: bool = True):
    """Load the base pipeline; with ``lora_dir``, load that LoRA and fuse it into the weights.

    Fusing makes sampling from a trained iteration exactly as fast as sampling from the base.
    A ``lora_dir`` holding a full diffusers folder (a fully fine-tuned model(it), train.adapter
    none) is loaded instead of the base. ``text_encoders=False`` leaves the text encoders out (None):
    training reads the prompt embeddings generate cached and never needs them (SD3.5's T5 alone is
    4.7 B parameters).
    """
    import torch

    from rewardloop.models.families import get_family

    family = get_family(model_cfg["family"])
    source = model_cfg["path"]
    if is_full_model(lora_dir):
        source, lora_dir = str(lora_dir), None
    cls = pipeline_class(model_cfg["family"])
    skipped = {} if text_encoders else {name: None for name in family.text_encoders}
    try:
        pipe = cls.from_pretrained(
            source,
            dtype=dtype or torch.float32,
            variant=None if source != model_cfg["path"] else model_cfg.get("variant"),
            **{**absent_components(source), **family.load_kwargs(), **skipped},
        )
    except (OSError, ValueError) as exc:
        raise ModelError(f"model.path: cannot load {source} as {cls.__name__} ({exc})") from exc
    pipe.to(device)  # before the LoRA: fused where the weights run (on a GPU, not on the CPU first)
    if lora_dir:
        from rewardloop.models.lora import load_lora_fused
        from rewardloop.host import library_noise

        # diffusers' "no text-encoder keys" of our denoiser-only LoRAs: silenced here as well as in job(),
        # for the processes no job starts (`accelerate launch`-ed training ranks, the command line).
        library_noise.install()
        load_lora_fused(pipe, family, lora_dir)
    pipe.set_progress_bar_config(disable=True)
    return pipe

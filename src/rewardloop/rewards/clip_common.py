"""Shared helpers of the model-based rewards: local-path checks, safe checkpoint loading and a
transformers CLIP embedder (used by ``pickscore``, ``clip_score`` and ``aesthetic``).

Everything loads from local files only (``local_files_only=True``, ``torch.load(weights_only=True)``):
a reward never downloads. Heavy imports (torch, transformers) happen inside functions, so importing
``rewardloop.rewards`` stays cheap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np


def require_path(reward: str, option: str, value, kind: str = "any") -> Path:
    """``value`` as an existing Path; ``ValueError`` naming ``rewards.<reward>.<option>`` otherwise.

    ``kind`` is ``"dir"``, ``"file"`` or ``"any"``.
    """
    key = f"rewards.{reward}.{option}"
    if value is None or str(value) == "":
        raise ValueError(f"'{key}' is required: a local path (rewards never download weights)")
    path = Path(value).expanduser()
    if not path.exists():
        raise ValueError(f"'{key}': {path} does not exist")
    if kind == "dir" and not path.is_dir():
        raise ValueError(f"'{key}': {path} is not a folder")
    if kind == "file" and not path.is_file():
        raise ValueError(f"'{key}': {path} is not a file")
    return path


def check_device(reward: str, device: str) -> str:
    if not isinstance(device, str) or not (device == "cpu" or device.startswith("cuda")):
        raise ValueError(f"'rewards.{reward}.device': expected 'cpu' or 'cuda[:N]', got {device!r}")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"'rewards.{reward}.device' is {device!r} but CUDA is not available")
    return device


def safe_torch_load(reward: str, option: str, path: Path):
    """``torch.load(path, map_location="cpu", weights_only=True)``; errors name the file.

    ``weights_only=True`` refuses pickles that would run code (``__reduce__`` payloads); only
    tensors and plain containers load.
    """
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(
            f"'rewards.{reward}.{option}': {path} refused or unreadable by "
            f"torch.load(weights_only=True) ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            "a pickle can run code when it is loaded, so only tensors and plain containers are read: save the "
            "weights with safetensors.torch.save_file instead"
        ) from exc


def to_rgb(images: Sequence) -> list:
    """PIL images (or HxWx3 uint8 arrays) as RGB PIL images."""
    from PIL import Image

    out = []
    for image in images:
        if not isinstance(image, Image.Image):
            image = Image.fromarray(np.asarray(image, dtype=np.uint8))
        out.append(image.convert("RGB"))
    return out


def _features(output):
    """transformers 5 returns a ModelOutput whose ``pooler_output`` is projected; 4.x a tensor."""
    import torch

    return output if torch.is_tensor(output) else output.pooler_output


class ClipEmbedder:
    """A transformers ``CLIPModel`` + ``CLIPProcessor`` computing L2-normalised embeddings.

    Build it with ``ClipEmbedder.load(...)`` from local folders, or directly from a model and a
    processor (benchmarks build the real architectures from configs with random weights).
    """

    def __init__(self, model, processor, device: str = "cpu"):
        import torch

        self.torch = torch
        self.device = device
        self.model = model.to(device).eval()
        self.processor = processor
        text_cfg = model.config.text_config
        self.max_length = min(
            int(getattr(processor.tokenizer, "model_max_length", 77) or 77),
            int(text_cfg.max_position_embeddings),
        )

    @classmethod
    def load(cls, reward: str, model_path, processor_path=None, device: str = "cpu",
             model_option: str = "model_path", processor_option: str = "processor_path") -> "ClipEmbedder":
        from transformers import CLIPModel, CLIPProcessor

        device = check_device(reward, device)
        model_dir = require_path(reward, model_option, model_path, kind="dir")
        if processor_path is None:
            processor_path, processor_option = model_dir, model_option
        processor_dir = require_path(reward, processor_option, processor_path, kind="dir")
        config_file = model_dir / "config.json"
        if not config_file.is_file():
            raise ValueError(
                f"'rewards.{reward}.{model_option}': {model_dir} is not a transformers model folder "
                f"(no config.json); expected a CLIPModel saved with save_pretrained"
            )
        config = json.loads(config_file.read_text())
        if config.get("model_type") != "clip":
            raise ValueError(
                f"'rewards.{reward}.{model_option}': {model_dir} holds a {config.get('model_type')!r} "
                f"model (architectures {config.get('architectures')}); expected a CLIP model (model_type 'clip')"
            )
        try:
            model = CLIPModel.from_pretrained(model_dir, local_files_only=True)
        except Exception as exc:
            raise ValueError(
                f"'rewards.{reward}.{model_option}': cannot load a CLIPModel from {model_dir} ({exc})"
            ) from exc
        try:
            processor = CLIPProcessor.from_pretrained(processor_dir, local_files_only=True)
        except Exception as exc:
            raise ValueError(
                f"'rewards.{reward}.{processor_option}': cannot load a CLIPProcessor from "
                f"{processor_dir} ({exc})"
            ) from exc
        return cls(model, processor, device)

    def image_embeds(self, images: Sequence):
        """L2-normalised projected image embeddings, shape (n, projection_dim), float32."""
        torch = self.torch
        inputs = self.processor(images=to_rgb(images), return_tensors="pt")
        pixel_values = inputs["pixel_values"].to(self.device, dtype=self.model.dtype)
        with torch.inference_mode():
            embeds = _features(self.model.get_image_features(pixel_values=pixel_values)).float()
        return embeds / embeds.norm(dim=-1, keepdim=True)

    def text_embeds(self, prompts: Sequence[str]):
        """L2-normalised projected text embeddings, shape (n, projection_dim), float32."""
        torch = self.torch
        inputs = self.processor(
            text=list(prompts), padding=True, truncation=True, max_length=self.max_length,
            return_tensors="pt",
        )
        inputs = {k: v.to(self.device) for k, v in inputs.items() if k in ("input_ids", "attention_mask")}
        with torch.inference_mode():
            embeds = _features(self.model.get_text_features(**inputs)).float()
        return embeds / embeds.norm(dim=-1, keepdim=True)

    def cosine(self, images: Sequence, prompts: Sequence[str]):
        """Cosine similarity of each image with its own prompt, shape (n,)."""
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
        return (self.image_embeds(images) * self.text_embeds(prompts)).sum(dim=-1)

    @property
    def logit_scale(self) -> float:
        return float(self.model.logit_scale.detach().float().exp())


class ClipPromptReward:
    """Base of the rewards that compare an image with its prompt through one CLIP model."""

    name = "clip"
    PATH_OPTIONS = {"model_path": ("dir", True), "processor_path": ("dir", False)}

    def __init__(self, model_path=None, processor_path=None, device: str = "cpu"):
        self.embedder = ClipEmbedder.load(self.name, model_path, processor_path, device)

    @staticmethod
    def check_prompts(prompts: Sequence[str]) -> None:
        return None  # any text can be embedded

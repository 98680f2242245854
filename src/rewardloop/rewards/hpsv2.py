"""``hpsv2``: Human Preference Score v2 / v2.1 (Wu et al., 2023), an open_clip ViT-H-14
fine-tuned on human preferences.

As in the HPSv2 reference code (``hpsv2/img_score.py``): the image goes through the model's
validation transform, image and prompt through ``encode_image`` / ``encode_text``, both
L2-normalised, and ``hps_score = diag(image_features @ text_features.T)``, i.e. the cosine of each
image with its own prompt, not scaled by ``logit_scale`` (typically ~0.2-0.3 for real images).

The model is built with ``open_clip`` (``create_model_and_transforms(arch, pretrained=None)``:
no pretrained download) and the HPS checkpoint loaded into it with
``torch.load(weights_only=True)``; the tokenizer is open_clip's ``SimpleTokenizer``, whose BPE
vocabulary ships in the open_clip wheel (no download). The ``hpsv2`` package is an optional
alternative loader; see docs/rewards.md for why it is not the default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from rewardloop.rewards.base import register
from rewardloop.rewards.clip_common import check_device, require_path, safe_torch_load, to_rgb

LOADERS = ("open_clip", "hpsv2")


def _open_clip_module(loader: str):
    if loader == "open_clip":
        import open_clip

        return open_clip
    try:
        from hpsv2.src import open_clip
    except Exception as exc:  # ImportError, or the hpsv2 package failing at import time
        raise ValueError(
            f"'rewards.hpsv2.loader' is 'hpsv2' but the hpsv2 package is not importable ({exc}); "
            f"install it (pip install hpsv2) or use the default loader 'open_clip'"
        ) from exc
    return open_clip


def _resolve_arch(oc, arch: str) -> str:
    """A registered open_clip model name, or a model-config JSON file (registered under its stem)."""
    if str(arch).endswith(".json"):
        path = require_path("hpsv2", "arch", arch, kind="file")
        oc.add_model_config(path)
        return path.stem
    if arch not in oc.list_models():
        raise ValueError(
            f"'rewards.hpsv2.arch': unknown open_clip architecture {arch!r} "
            f"(a registered model name such as ViT-H-14, or a model-config .json file)"
        )
    return arch


def checkpoint_state_dict(checkpoint, path: Path) -> dict:
    """The model state dict of an HPS checkpoint: ``{"state_dict": sd, ...}`` or ``sd`` itself;
    a DistributedDataParallel ``module.`` prefix is dropped."""
    state = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict) or not state:
        raise ValueError(
            f"'rewards.hpsv2.checkpoint_path': {path} holds no state dict "
            f"(expected a dict of tensors or {{'state_dict': ...}})"
        )
    if all(key.startswith("module.") for key in state):
        state = {key[len("module."):]: value for key, value in state.items()}
    return state


@register("hpsv2")
class HPSv2:
    """HPS v2 / v2.1 score of each image against its prompt.

    Options (``rewards.hpsv2.<option>``):

    - ``checkpoint_path`` (required): local HPS checkpoint, ``HPS_v2_compressed.pt`` or
      ``HPS_v2.1_compressed.pt`` from ``xswu/HPSv2`` (a ``{"state_dict": ...}`` dict or a plain
      state dict), loaded with ``torch.load(weights_only=True)``.
    - ``arch``: open_clip architecture, default ``"ViT-H-14"`` (the one HPS v2 / v2.1 use); a
      registered model name or a path to an open_clip model-config ``.json`` file.
    - ``loader``: ``"open_clip"`` (default) or ``"hpsv2"`` (the ``hpsv2`` package's vendored
      open_clip; only when that package is importable).
    - ``device``: ``"cpu"`` (default) or ``"cuda"`` / ``"cuda:N"``.

    Batching is the caller's (``RewardSet.score(batch_size=...)``). Computes in float32 (the
    reference code uses CUDA autocast; scores differ from it at the ~1e-3 level on GPU).
    """

    name = "hpsv2"
    PATH_OPTIONS = {"checkpoint_path": ("file", True)}

    def __init__(self, checkpoint_path=None, arch: str = "ViT-H-14", loader: str = "open_clip",
                 device: str = "cpu"):
        if loader not in LOADERS:
            raise ValueError(f"'rewards.hpsv2.loader': expected one of {', '.join(LOADERS)}, got {loader!r}")
        device = check_device(self.name, device)
        path = require_path(self.name, "checkpoint_path", checkpoint_path, kind="file")
        oc = _open_clip_module(loader)
        arch = _resolve_arch(oc, arch)
        state = checkpoint_state_dict(safe_torch_load(self.name, "checkpoint_path", path), path)
        model, _, preprocess = oc.create_model_and_transforms(arch, pretrained=None, device="cpu")
        try:
            model.load_state_dict(state)
        except Exception as exc:
            raise ValueError(
                f"'rewards.hpsv2.checkpoint_path': {path} does not fit the open_clip "
                f"{arch!r} model ({str(exc).splitlines()[0]} ...)"
            ) from exc
        self._init(model, preprocess, oc.get_tokenizer(arch), device)

    def _init(self, model, preprocess, tokenizer, device: str) -> None:
        self.device = device
        self.model = model.to(device).eval()
        self.preprocess = preprocess
        self.tokenizer = tokenizer

    @classmethod
    def from_model(cls, model, preprocess, tokenizer, device: str = "cpu") -> "HPSv2":
        reward = cls.__new__(cls)
        reward._init(model, preprocess, tokenizer, device)
        return reward

    @staticmethod
    def check_prompts(prompts: Sequence[str]) -> None:
        return None

    def score(self, images: Sequence, prompts: Sequence[str]) -> tuple[np.ndarray, list[dict]]:
        import torch

        images, prompts = to_rgb(images), list(prompts)
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
        pixels = torch.stack([self.preprocess(image) for image in images]).to(self.device)
        tokens = self.tokenizer(prompts).to(self.device)
        with torch.inference_mode():
            image_features = self.model.encode_image(pixels, normalize=True).float()
            text_features = self.model.encode_text(tokens, normalize=True).float()
        # diag(image_features @ text_features.T) without the n x n product
        scores = (image_features * text_features).sum(dim=-1)
        return scores.cpu().numpy().astype(np.float64), [{} for _ in images]

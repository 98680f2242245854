"""``aesthetic``: the LAION aesthetic predictor (improved-aesthetic-predictor, "v2").

The CLIP ViT-L/14 image embedding (projected, L2-normalised) goes through the published MLP::

    Linear(d, 1024), Dropout(0.2), Linear(1024, 128), Dropout(0.2), Linear(128, 64),
    Dropout(0.1), Linear(64, 16), Linear(16, 1)

(``d`` = the CLIP projection dim, 768 for ViT-L/14), giving a rating on a ~1-10 scale. Prompts are
ignored. The MLP's state dict has the keys ``layers.{0,2,4,6,7}.{weight,bias}`` of the published
``sac+logos+ava1-l14-linearMSE.pth``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rewardloop.rewards.base import register
from rewardloop.rewards.clip_common import ClipEmbedder, require_path, safe_torch_load


def build_mlp(input_dim: int):
    """The published aesthetic MLP (randomly initialised)."""
    from torch import nn

    class AestheticMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(
                nn.Linear(input_dim, 1024),
                nn.Dropout(0.2),
                nn.Linear(1024, 128),
                nn.Dropout(0.2),
                nn.Linear(128, 64),
                nn.Dropout(0.1),
                nn.Linear(64, 16),
                nn.Linear(16, 1),
            )

        def forward(self, x):
            return self.layers(x)

    return AestheticMLP()


@register("aesthetic")
class Aesthetic:
    """LAION aesthetic score of each image (prompts are ignored).

    Options (``rewards.aesthetic.<option>``):

    - ``clip_path`` (required): local folder of ``openai/clip-vit-large-patch14`` (transformers
      ``CLIPModel`` + its processor files).
    - ``mlp_path`` (required): the MLP weights, e.g. ``sac+logos+ava1-l14-linearMSE.pth``, loaded
      with ``torch.load(weights_only=True)`` (pickles that would run code are refused).
    - ``processor_path``: folder of the CLIP processor; default: ``clip_path``.
    - ``device``: ``"cpu"`` (default) or ``"cuda"`` / ``"cuda:N"``.

    Batching is the caller's (``RewardSet.score(batch_size=...)``).
    """

    name = "aesthetic"
    PATH_OPTIONS = {"clip_path": ("dir", True), "mlp_path": ("file", True), "processor_path": ("dir", False)}

    def __init__(self, clip_path=None, mlp_path=None, processor_path=None, device: str = "cpu"):
        mlp_file = require_path(self.name, "mlp_path", mlp_path, kind="file")
        require_path(self.name, "clip_path", clip_path, kind="dir")
        state = safe_torch_load(self.name, "mlp_path", mlp_file)  # a refused pickle costs no model load
        embedder = ClipEmbedder.load(
            self.name, clip_path, processor_path, device, model_option="clip_path"
        )
        mlp = build_mlp(int(embedder.model.config.projection_dim))
        try:
            mlp.load_state_dict(state)
        except Exception as exc:
            raise ValueError(
                f"'rewards.aesthetic.mlp_path': {mlp_file} is not an aesthetic MLP state dict for "
                f"CLIP projection dim {embedder.model.config.projection_dim} ({exc})"
            ) from exc
        self._init(embedder, mlp)

    def _init(self, embedder: ClipEmbedder, mlp) -> None:
        self.embedder = embedder
        self.mlp = mlp.to(embedder.device).eval()

    @classmethod
    def from_parts(cls, embedder: ClipEmbedder, mlp) -> "Aesthetic":
        reward = cls.__new__(cls)
        reward._init(embedder, mlp)
        return reward

    @staticmethod
    def check_prompts(prompts: Sequence[str]) -> None:
        return None

    def score(self, images: Sequence, prompts: Sequence[str]) -> tuple[np.ndarray, list[dict]]:
        import torch

        embeds = self.embedder.image_embeds(list(images))
        with torch.inference_mode():
            scores = self.mlp(embeds).reshape(-1)
        return scores.float().cpu().numpy().astype(np.float64), [{} for _ in range(len(embeds))]

"""``clip_score``: CLIPScore (Hessel et al., 2021) as torchmetrics computes it.

``100 * max(cosine(image_embeds, text_embeds), 0)`` per image and its own prompt, with the
projected CLIP embeddings of a transformers ``CLIPModel`` (torchmetrics' ``CLIPScore`` clamps at
0 and scales by 100 the same way; it averages over the batch, this reward does not).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rewardloop.rewards.base import register
from rewardloop.rewards.clip_common import ClipPromptReward


@register("clip_score")
class ClipScore(ClipPromptReward):
    """CLIPScore in [0, 100] of each image against its prompt.

    Options (``rewards.clip_score.<option>``):

    - ``model_path`` (required): local folder of a transformers ``CLIPModel``, e.g.
      ``openai/clip-vit-large-patch14`` (torchmetrics' default) saved with ``save_pretrained``.
    - ``processor_path``: local folder of its ``CLIPProcessor``; default: ``model_path``.
    - ``device``: ``"cpu"`` (default) or ``"cuda"`` / ``"cuda:N"``.

    Batching is the caller's (``RewardSet.score(batch_size=...)``).
    """

    name = "clip_score"

    def score(self, images: Sequence, prompts: Sequence[str]) -> tuple[np.ndarray, list[dict]]:
        cosine = self.embedder.cosine(list(images), list(prompts)).cpu().numpy().astype(np.float64)
        return 100.0 * np.maximum(cosine, 0.0), [{"cosine": float(c)} for c in cosine]

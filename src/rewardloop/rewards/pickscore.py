"""``pickscore``: PickScore (Kirstain et al., 2023), a CLIP-H model fine-tuned on Pick-a-Pic
human preferences.

As in the PickScore reference code, each image and its own prompt are embedded with
``CLIPModel.get_image_features`` / ``get_text_features``, L2-normalised, and scored
``logit_scale.exp() * cosine(image, prompt)`` (typically ~18-23 for real images).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rewardloop.rewards.base import register
from rewardloop.rewards.clip_common import ClipPromptReward


@register("pickscore")
class PickScore(ClipPromptReward):
    """PickScore of each image against its prompt.

    Options (``rewards.pickscore.<option>``):

    - ``model_path`` (required): local folder of ``yuvalkirstain/PickScore_v1`` (a transformers
      ``CLIPModel`` saved with ``save_pretrained``: ``config.json`` + weights).
    - ``processor_path``: local folder of the ``laion/CLIP-ViT-H-14-laion2B-s32B-b79K``
      processor (tokenizer + ``preprocessor_config.json``); default: ``model_path``.
    - ``device``: ``"cpu"`` (default) or ``"cuda"`` / ``"cuda:N"``.

    Batching is the caller's (``RewardSet.score(batch_size=...)``, ``rewardloop score --batch-size``).
    """

    name = "pickscore"

    def score(self, images: Sequence, prompts: Sequence[str]) -> tuple[np.ndarray, list[dict]]:
        cosine = self.embedder.cosine(list(images), list(prompts))
        scores = (self.embedder.logit_scale * cosine).cpu().numpy().astype(np.float64)
        return scores, [{} for _ in scores]

"""``color_match``: model-free prompt adherence for the synthetic shape domain.

For a prompt ``"a <fg> <shape> on a <bg> background"`` each pixel ``p`` gets a soft membership in
each named colour, ``m_c(p) = max(0, 1 - |p - c| / max_distance)`` (Euclidean RGB distance to the
palette colour, ``rewardloop.shape_domain.PALETTE``; ``max_distance`` 120 is about the smallest
separation of two palette colours). With ``F`` and ``B`` the mean memberships in the shape and
background colours and ``[a_min, a_max]`` the range of area fractions the shape has in the
training renders (``shape_domain.area_fraction_range``)::

    purity   = mean_p max(m_fg(p), m_bg(p))                      how much of the image is in the named colours
    presence = min(1, F / (a_min / 2)) * min(1, B / (1 - a_max))    both colours really present
    score    = 2 * purity * presence                                 in [0, 2]

A crisp correct render scores 2. The score is continuous: off-hue, washed-out or blurred colours
lose a little, so it does not saturate on a model that is already roughly right (a capped
fraction-of-pixels score sat at its maximum for most samples of the pretrained tiny model and gave
DPO no preference to learn). One colour alone (e.g. only background) scores 0 through
``presence``; swapped colours keep the purity but lose about half of it through the background
term (the named background colour covers only the shape's area); two wrong colours score near 0. The shape's geometry is not scored.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from PIL import Image

from rewardloop import shape_domain
from rewardloop.rewards.base import register


def _as_rgb_array(image) -> np.ndarray:
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"), dtype=np.float32)
    array = np.asarray(image, dtype=np.float32)
    if array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"expected an RGB image (H, W, 3), got shape {array.shape}")
    return array


def membership(image, colour: str, max_distance: float) -> np.ndarray:
    """Per-pixel soft membership in a palette colour, in [0, 1]."""
    pixels = _as_rgb_array(image).reshape(-1, 3)
    distance = np.linalg.norm(pixels - np.asarray(shape_domain.PALETTE[colour], dtype=np.float32), axis=1)
    return np.clip(1.0 - distance / max_distance, 0.0, 1.0)


@register("color_match")
class ColorMatch:
    """How much of the image shows the shape and background colours the prompt names (0-2)."""

    name = "color_match"

    def __init__(self, max_distance: float = 120.0):
        self.max_distance = float(max_distance)

    @staticmethod
    def check_prompts(prompts: Sequence[str]) -> None:
        for prompt in prompts:
            shape_domain.parse_caption(prompt)

    def score_one(self, image, prompt: str) -> dict:
        shape, fg, bg = shape_domain.parse_caption(prompt)
        m_fg = membership(image, fg, self.max_distance)
        m_bg = membership(image, bg, self.max_distance)
        a_min, a_max = shape_domain.area_fraction_range(shape)
        purity = float(np.maximum(m_fg, m_bg).mean())
        presence = min(1.0, m_fg.mean() / (a_min / 2)) * min(1.0, m_bg.mean() / (1.0 - a_max))
        return {"score": 2.0 * purity * presence, "purity": purity, "presence": float(presence)}

    def score(self, images: Sequence, prompts: Sequence[str]) -> tuple[np.ndarray, list[dict]]:
        if len(images) != len(prompts):
            raise ValueError(f"got {len(images)} images but {len(prompts)} prompts")
        self.check_prompts(prompts)
        details = [self.score_one(image, prompt) for image, prompt in zip(images, prompts)]
        scores = np.array([d.pop("score") for d in details], dtype=np.float64)
        return scores, details

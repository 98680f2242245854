"""``color_match``: model-free prompt adherence for the synthetic shape domain.

For a prompt ``"a <fg> <shape> on a <bg> background"`` every pixel is assigned to its nearest
palette colour (``rewardloop.synthetic.PALETTE``, Euclidean RGB distance) if that distance is at
most ``max_distance`` (default 80 of the ~120 smallest palette separation); other pixels stay
unassigned. With ``f_fg`` and ``f_bg`` the fractions of pixels assigned to the named colours and
``[a_min, a_max]`` the range of area fractions the named shape has in the training renders
(``synthetic.area_fraction_range``)::

    score = min(1, f_fg / a_min) + min(1, f_bg / (1 - a_max))      in [0, 2]

Every correct render scores 2 (the shape colour covers at least the smallest shape, the background
colour at least what the largest shape leaves free). Swapped colours earn at most ~1.56 (the
shape term is satisfied by the large background area, the background term is not), one right
colour ~1, uniform RGB noise ~0.5, two wrong colours 0. The shape's geometry is not scored.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from PIL import Image

from rewardloop import synthetic
from rewardloop.rewards.base import register

_PALETTE = np.array(list(synthetic.PALETTE.values()), dtype=np.float32)
_INDEX = {name: i for i, name in enumerate(synthetic.PALETTE)}


def _as_rgb_array(image) -> np.ndarray:
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"), dtype=np.float32)
    array = np.asarray(image, dtype=np.float32)
    if array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"expected an RGB image (H, W, 3), got shape {array.shape}")
    return array


def palette_assignment(image, max_distance: float = 80.0) -> np.ndarray:
    """Per-pixel index of the nearest palette colour, or -1 when farther than ``max_distance``."""
    pixels = _as_rgb_array(image).reshape(-1, 3)
    dist = np.linalg.norm(pixels[:, None, :] - _PALETTE[None, :, :], axis=-1)
    nearest = dist.argmin(axis=1)
    nearest[dist.min(axis=1) > max_distance] = -1
    return nearest


@register("color_match")
class ColorMatch:
    """Fraction of the image in the prompt's named shape and background colours (0-2)."""

    name = "color_match"

    def __init__(self, max_distance: float = 80.0):
        self.max_distance = float(max_distance)

    @staticmethod
    def check_prompts(prompts: Sequence[str]) -> None:
        for prompt in prompts:
            synthetic.parse_caption(prompt)

    def score_one(self, image, prompt: str) -> dict:
        shape, fg, bg = synthetic.parse_caption(prompt)
        assigned = palette_assignment(image, self.max_distance)
        fg_fraction = float(np.mean(assigned == _INDEX[fg]))
        bg_fraction = float(np.mean(assigned == _INDEX[bg]))
        a_min, a_max = synthetic.area_fraction_range(shape)
        score = min(1.0, fg_fraction / a_min) + min(1.0, bg_fraction / (1.0 - a_max))
        return {"score": score, "fg_fraction": fg_fraction, "bg_fraction": bg_fraction}

    def score(self, images: Sequence, prompts: Sequence[str]) -> tuple[np.ndarray, list[dict]]:
        if len(images) != len(prompts):
            raise ValueError(f"got {len(images)} images but {len(prompts)} prompts")
        self.check_prompts(prompts)
        details = [self.score_one(image, prompt) for image, prompt in zip(images, prompts)]
        scores = np.array([d.pop("score") for d in details], dtype=np.float64)
        return scores, details

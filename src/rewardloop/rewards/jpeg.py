"""JPEG (in)compressibility rewards, as defined by DDPO (Black et al., 2023).

The score is the size in kB (bytes / 1000) of the image saved as JPEG at quality 95;
``jpeg_incompressibility`` rewards large files, ``jpeg_compressibility`` small ones (negated size).
"""

from __future__ import annotations

import io
from typing import Sequence

import numpy as np

from rewardloop.rewards.base import register

JPEG_QUALITY = 95


def jpeg_size_kb(image) -> float:
    """Size in kB of a PIL image encoded as JPEG at quality 95."""
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=JPEG_QUALITY)
    return buf.tell() / 1000


class JpegSizeReward:
    """``sign * jpeg_size_kb(image)``; prompts are ignored."""

    def __init__(self, name: str, sign: float):
        self.name = name
        self.sign = sign

    def check_prompts(self, prompts: Sequence[str]) -> None:
        return None

    def score(self, images: Sequence, prompts: Sequence[str]) -> tuple[np.ndarray, list[dict]]:
        sizes = np.array([jpeg_size_kb(image) for image in images], dtype=np.float64)
        return self.sign * sizes, [{} for _ in images]


def _register_jpeg(name: str, sign: float) -> None:
    def factory(**options) -> JpegSizeReward:
        if options:
            raise ValueError(f"reward {name!r} takes no options; got {', '.join(sorted(options))}")
        return JpegSizeReward(name, sign)

    register(name)(factory)


_register_jpeg("jpeg_compressibility", -1.0)
_register_jpeg("jpeg_incompressibility", 1.0)

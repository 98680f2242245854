"""OCR reward: does the image render the text quoted in its prompt?

The target is the first double-quoted span of the prompt (``"..."`` or ``“...”``). With both
strings normalised (lower-cased, all whitespace removed) and ``n`` the target's length, the reward
is ``1 - min(dist, n) / n`` where ``dist`` is 0 when the target is a substring of the recognised
text and their Levenshtein distance otherwise.

Backends are small classes with ``read_text(image) -> str``, listed in ``BACKENDS``.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np
from rapidfuzz.distance import Levenshtein

from rewardloop.rewards.base import register

# Earliest match wins, whichever quote style it uses.
_QUOTED = re.compile(r'"([^"]*)"|“([^”]*)”')
_WHITESPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    return _WHITESPACE.sub("", text).lower()


def extract_target(prompt: str) -> str | None:
    """The first quoted span of ``prompt`` with visible text, or None when there is none."""
    for match in _QUOTED.finditer(prompt):
        span = match.group(1) if match.group(1) is not None else match.group(2)
        if normalise(span):
            return span
    return None


def ocr_score(recognised: str, target: str) -> float:
    """Score in [0, 1] of the recognised text against the (non-empty) target."""
    text, goal = normalise(recognised), normalise(target)
    if not goal:
        raise ValueError("OCR target is empty after normalisation")
    dist = 0 if goal in text else Levenshtein.distance(goal, text)
    return 1.0 - min(dist, len(goal)) / len(goal)


class RapidOCRBackend:
    """PP-OCR via ``rapidocr`` 3.x on onnxruntime; the models ship in the wheel (no download)."""

    def __init__(self):
        from rapidocr import RapidOCR

        # "error" silences the per-image warning rapidocr logs when it finds no text.
        self._engine = RapidOCR(params={"Global.log_level": "error"})

    def read_text(self, image) -> str:
        result = self._engine(image.convert("RGB"))
        # Empty images give an output whose ``txts`` is None; lines come top to bottom.
        return " ".join(getattr(result, "txts", None) or ())


BACKENDS = {"rapidocr": RapidOCRBackend}


@register("ocr")
class OCRReward:
    """Text-rendering accuracy of each image against its prompt's quoted target."""

    name = "ocr"

    def __init__(self, backend: str = "rapidocr"):
        if backend not in BACKENDS:
            raise ValueError(
                f"unknown OCR backend {backend!r} in 'rewards.ocr.backend': "
                f"expected one of {', '.join(sorted(BACKENDS))}"
            )
        self.backend = BACKENDS[backend]()

    @staticmethod
    def check_prompts(prompts: Sequence[str]) -> None:
        for index, prompt in enumerate(prompts):
            if extract_target(prompt) is None:
                raise ValueError(
                    f"reward 'ocr' needs a double-quoted target text in every prompt; "
                    f"prompt {index} has none: {prompt!r}"
                )

    def score(self, images: Sequence, prompts: Sequence[str]) -> tuple[np.ndarray, list[dict]]:
        self.check_prompts(prompts)
        scores, details = [], []
        for image, prompt in zip(images, prompts, strict=True):
            target = extract_target(prompt)
            text = self.backend.read_text(image)
            scores.append(ocr_score(text, target))
            details.append({"ocr_text": text, "ocr_target": target})
        return np.array(scores, dtype=np.float64), details

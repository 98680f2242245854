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


class PaddleOCRBackend:
    """PP-OCR via ``paddleocr`` 3.x (separate environment: ``envs/paddleocr.yaml``).

    Options ``text_detection_model_dir`` and ``text_recognition_model_dir`` (required: local
    Paddle inference model folders, so paddleocr never downloads) and optionally
    ``text_detection_model_name`` / ``text_recognition_model_name`` (the PaddleX model names of
    those folders, e.g. ``PP-OCRv4_mobile_det``; default: ``Global.model_name`` of the folder's
    ``inference.yml``) are passed to ``paddleocr.PaddleOCR``.
    ``enable_mkldnn`` (default False: paddlepaddle 3.3's oneDNN path fails on the PP-OCRv4 models
    with "ConvertPirAttribute2RuntimeAttribute not support") is passed on too.
    """

    def __init__(self, text_detection_model_dir=None, text_recognition_model_dir=None,
                 text_detection_model_name=None, text_recognition_model_name=None,
                 enable_mkldnn: bool = False):
        from pathlib import Path

        dirs = {"text_detection_model_dir": text_detection_model_dir,
                "text_recognition_model_dir": text_recognition_model_dir}
        for option, value in dirs.items():
            if value is None or not Path(value).is_dir():
                raise ValueError(
                    f"'rewards.ocr.{option}' must be a local Paddle model folder for backend "
                    f"'paddleocr' (it would download otherwise); got {value!r}"
                    + ("" if value is None else " (not a folder)")
                )
        try:
            from paddleocr import PaddleOCR
        except ImportError as exc:
            raise ValueError(
                f"OCR backend 'paddleocr' needs the paddleocr package ({exc}); "
                f"use the envs/paddleocr.yaml environment"
            ) from exc
        names = {"text_detection_model_name": text_detection_model_name,
                 "text_recognition_model_name": text_recognition_model_name}
        for (name_option, name), folder in zip(list(names.items()), dirs.values()):
            config = Path(folder) / "inference.yml"
            if name is None and config.is_file():  # PaddleX otherwise assumes its newest model
                import yaml

                names[name_option] = (yaml.safe_load(config.read_text()) or {}).get("Global", {}).get("model_name")
        self._engine = PaddleOCR(
            **{k: str(v) for k, v in dirs.items()},
            **{k: v for k, v in names.items() if v is not None},
            use_doc_orientation_classify=False,
            use_doc_unwarping=False,
            use_textline_orientation=False,
            enable_mkldnn=bool(enable_mkldnn),
        )

    def read_text(self, image) -> str:
        results = self._engine.predict(np.asarray(image.convert("RGB"))[:, :, ::-1].copy())  # BGR
        return " ".join(text for result in results or () for text in (result["rec_texts"] or ()))


BACKENDS = {"rapidocr": RapidOCRBackend, "paddleocr": PaddleOCRBackend}


@register("ocr")
class OCRReward:
    """Text-rendering accuracy of each image against its prompt's quoted target.

    Options (``rewards.ocr.<option>``): ``backend`` (``"rapidocr"``, the default, models in the
    wheel; or ``"paddleocr"``); the paddleocr backend also takes ``text_detection_model_dir`` and
    ``text_recognition_model_dir`` (required) and ``text_detection_model_name`` /
    ``text_recognition_model_name`` (optional), see ``PaddleOCRBackend``.
    """

    name = "ocr"

    def __init__(self, backend: str = "rapidocr", **backend_options):
        if backend not in BACKENDS:
            raise ValueError(
                f"unknown OCR backend {backend!r} in 'rewards.ocr.backend': "
                f"expected one of {', '.join(sorted(BACKENDS))}"
            )
        try:
            self.backend = BACKENDS[backend](**backend_options)
        except TypeError as exc:
            if backend_options and "unexpected keyword" in str(exc):
                raise ValueError(
                    f"'rewards.ocr': backend {backend!r} does not take option(s) "
                    f"{', '.join(sorted(backend_options))} ({exc})"
                ) from exc
            raise

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

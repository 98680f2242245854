"""The synthetic shape domain's vocabulary: its colours, shapes and captions, and the sizes its shapes
are drawn at. Shared by the tiny model's training data (``rewardloop.models.tiny.synthetic``, which draws
the images) and the ``color_match`` reward (which scores them), so neither wing imports the other.

Captions read ``"a red circle on a blue background"``.
"""

from __future__ import annotations

import re

import numpy as np

# Well-separated palette (RGB, 0-255); the minimum pairwise distance is about 120.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 50),
    "blue": (30, 60, 220),
    "yellow": (245, 225, 40),
    "purple": (140, 40, 170),
    "cyan": (40, 210, 225),
    "white": (245, 245, 245),
    "black": (15, 15, 15),
}
COLORS: tuple[str, ...] = tuple(PALETTE)
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
# Jitter range of the shape's half-extent, as a fraction of the image side.
HALF_EXTENT_RANGE = (0.2, 0.3)

_CAPTION_RE = re.compile(
    r"^\s*(?:an?\s+)?([a-z]+)\s+([a-z]+)\s+on\s+(?:an?\s+)?([a-z]+)\s+background\s*[.!]?\s*$"
)


def caption(shape: str, fg: str, bg: str) -> str:
    """``caption("circle", "red", "blue") == "a red circle on a blue background"``."""
    validate(shape, fg, bg)
    return f"a {fg} {shape} on a {bg} background"


def parse_caption(prompt: str) -> tuple[str, str, str]:
    """Inverse of ``caption``: return ``(shape, fg, bg)``; tolerant of case, spacing, articles."""
    match = _CAPTION_RE.match(str(prompt).lower())
    if match is None:
        raise ValueError(f"prompt {prompt!r} is not a synthetic caption like {caption(*_EXAMPLE)!r}")
    fg, shape, bg = match.groups()
    try:
        validate(shape, fg, bg)
    except ValueError as exc:
        raise ValueError(f"prompt {prompt!r}: {exc}") from None
    return shape, fg, bg


def validate(shape: str, fg: str, bg: str) -> None:
    """Raise ValueError naming what is not in the domain: the shape, a colour, or one colour for both."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; expected one of {', '.join(SHAPES)}")
    for colour in (fg, bg):
        if colour not in PALETTE:
            raise ValueError(f"unknown colour {colour!r}; expected one of {', '.join(COLORS)}")
    if fg == bg:
        raise ValueError(f"shape and background have the same colour {fg!r}")


_EXAMPLE = ("circle", "red", "blue")


def shape_area_fraction(shape: str, half_extent: float) -> float:
    """Area of ``shape`` with the given half-extent, as a fraction of the image area."""
    factor = {"circle": np.pi, "square": 4.0, "triangle": 2.0}[shape]
    return float(factor * half_extent**2)


def area_fraction_range(shape: str) -> tuple[float, float]:
    """Smallest and largest area fraction a drawn ``shape`` has (before pixelisation)."""
    low, high = HALF_EXTENT_RANGE
    return shape_area_fraction(shape, low), shape_area_fraction(shape, high)

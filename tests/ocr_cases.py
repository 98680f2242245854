"""Rendered-text images shared by the OCR tests of every backend, so they are judged on the same
images: several strings, two sizes, a rotated and a noisy case, and images that must not read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


def render(text: str, size: int = 36, angle: float = 0.0, noise: float = 0.0, seed: int = 0) -> Image.Image:
    image = Image.new("RGB", (360, 110), "white")
    ImageDraw.Draw(image).text((16, 28), text, fill="black", font=ImageFont.truetype(str(FONT), size))
    if angle:
        image = image.rotate(angle, expand=True, fillcolor="white")
    if noise:
        pixels = np.asarray(image, dtype=np.float32)
        pixels += np.random.default_rng(seed).normal(0, noise, pixels.shape)
        image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    return image


def cases() -> list[tuple[str, Image.Image, str, bool]]:
    """(name, image, prompt, should_read_correctly)."""
    noise = Image.fromarray(np.random.default_rng(0).integers(0, 256, (110, 360, 3), dtype=np.uint8))
    return [
        ("plain", render("hello world"), 'a sign that says "hello world"', True),
        ("caps", render("OPEN 24 HOURS"), 'a poster that says "OPEN 24 HOURS"', True),
        ("small", render("Diffusion", size=24), 'a logo saying "Diffusion"', True),
        ("rotated", render("Miles", size=40, angle=6), 'a logo saying "Miles"', True),
        ("noisy", render("reward", size=40, noise=25), 'a poster that says "reward"', True),
        ("wrong text", render("hello world"), 'a sign that says "quantum banana"', False),
        ("blank", Image.new("RGB", (360, 110), "white"), 'a sign that says "hello"', False),
        ("noise", noise, 'a sign that says "hello world"', False),
    ]


def assert_reads_as_expected(scores, details) -> None:
    for (name, _, _, readable), score, detail in zip(cases(), scores, details):
        if readable:
            assert score >= 0.9, (name, score, detail)
        else:
            assert score < 0.5, (name, score, detail)

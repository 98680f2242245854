"""Image-health statistics: what reward hacking does to images, measured without any model.

Each statistic is a mean over images (``diversity`` a mean over prompts) of RGB pixel values in [0, 1]:

- ``dark_fraction`` / ``bright_fraction``: pixels whose luma (Rec. 601) is below 0.1 / above 0.9
  (an OCR run hacked into near-black images drives the first towards 1).
- ``colour_entropy``: Shannon entropy in bits of the image's colours quantised to 8 levels per
  channel (0 for one flat colour, at most 9); flat or posterised images lower it.
- ``saturation``: HSV saturation (max - min) / max, 0 for greys.
- ``high_frequency_energy``: the share of the luma's spectral energy (its mean removed) above half
  the Nyquist frequency; grid and texture artifacts raise it (a pixel checkerboard is 1).
- ``diversity``: within a prompt's images, the mean pairwise RMS distance of the images downsampled
  to 16 x 16 pixels (0 when every seed gives the same image); mode collapse lowers it.
"""

from __future__ import annotations

from itertools import combinations
from typing import Iterable, Sequence

import numpy as np

DARK_LUMA, BRIGHT_LUMA = 0.1, 0.9
COLOUR_LEVELS = 8
DIVERSITY_SIZE = 16
STATISTICS = ("dark_fraction", "bright_fraction", "colour_entropy", "saturation", "high_frequency_energy",
              "diversity")


def pixels(image) -> np.ndarray:
    """An H x W x 3 float array in [0, 1] of a PIL image."""
    return np.asarray(image.convert("RGB"), dtype=np.float64) / 255.0


def luma(rgb: np.ndarray) -> np.ndarray:
    return rgb @ np.array([0.299, 0.587, 0.114])


def colour_entropy(rgb: np.ndarray) -> float:
    levels = np.minimum((rgb * COLOUR_LEVELS).astype(int), COLOUR_LEVELS - 1)
    codes = (levels[..., 0] * COLOUR_LEVELS + levels[..., 1]) * COLOUR_LEVELS + levels[..., 2]
    counts = np.bincount(codes.ravel())
    p = counts[counts > 0] / codes.size
    return float(max(0.0, -(p * np.log2(p)).sum()))


def saturation(rgb: np.ndarray) -> float:
    high, low = rgb.max(axis=-1), rgb.min(axis=-1)
    return float(np.where(high > 0, (high - low) / np.where(high > 0, high, 1), 0).mean())


def high_frequency_energy(rgb: np.ndarray) -> float:
    y = luma(rgb)
    power = np.abs(np.fft.fft2(y - y.mean())) ** 2
    total = power.sum()
    if total <= 1e-12:  # a flat image has no texture at all
        return 0.0
    fy = np.abs(np.fft.fftfreq(y.shape[0]))[:, None]
    fx = np.abs(np.fft.fftfreq(y.shape[1]))[None, :]
    high = np.maximum(fy, fx) > 0.25  # above half of Nyquist (0.5 cycles per pixel) on either axis
    return float(power[high].sum() / total)


def thumbnail(image) -> np.ndarray:
    from PIL import Image

    return pixels(image.resize((DIVERSITY_SIZE, DIVERSITY_SIZE), Image.BILINEAR)).ravel()


def mean_pairwise_distance(groups: Iterable[list[np.ndarray]]) -> float:
    """Mean over groups of two thumbnails or more of their mean pairwise RMS distance (nan: no such group)."""
    means = [np.mean([np.sqrt(np.mean((a - b) ** 2)) for a, b in combinations(thumbs, 2)])
             for thumbs in groups if len(thumbs) > 1]
    return float(np.mean(means)) if means else float("nan")


def image_statistics(image) -> dict[str, float]:
    """Every per-image statistic of one image."""
    rgb = pixels(image)
    y = luma(rgb)
    return {
        "dark_fraction": float((y < DARK_LUMA).mean()),
        "bright_fraction": float((y > BRIGHT_LUMA).mean()),
        "colour_entropy": colour_entropy(rgb),
        "saturation": saturation(rgb),
        "high_frequency_energy": high_frequency_energy(rgb),
    }


def health(images: Iterable, groups: Sequence) -> dict[str, float]:
    """``STATISTICS`` of a set of images; ``groups`` (e.g. prompt ids) say which images share a prompt.

    ``images`` may be a generator: each image is measured and let go (only its thumbnail is kept).
    """
    per_image, thumbs = [], {}
    for image, group in zip(images, groups):
        per_image.append(image_statistics(image))
        thumbs.setdefault(group, []).append(thumbnail(image))
    if not per_image:
        raise ValueError("image health of no images")
    stats = {name: float(np.mean([s[name] for s in per_image])) for name in per_image[0]}
    stats["diversity"] = mean_pairwise_distance(thumbs.values())
    return stats

"""A synthetic captioned image domain: one coloured shape on a flat coloured background.

Captions read ``"a red circle on a blue background"`` (its colours, shapes and captions:
``rewardloop.shape_domain``). The domain is small enough to pretrain a tiny text-to-image model on
two CPU cores in minutes, and its prompt adherence can be scored exactly from pixel colours (see
``rewardloop.rewards.color_match``).

``split_prompts(seed)`` holds out one shape of every (foreground, background) colour pair: every
eval prompt is a (shape, colour, background) combination never seen in training, while its colour
pair and its shape each appear in training (in other combinations), and the eval set covers all
56 colour pairs, so no single pair dominates its mean.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from PIL import Image, ImageDraw

from rewardloop.shape_domain import COLORS, HALF_EXTENT_RANGE, PALETTE, SHAPES, caption, parse_caption, validate

PROMPT_DIR = Path(__file__).resolve().parents[4] / "resources" / "prompts"


def render(shape: str, fg: str, bg: str, size: int = 32, rng: np.random.Generator | None = None):
    """Draw one ``fg`` shape with jittered size and position on a flat ``bg`` background."""
    validate(shape, fg, bg)
    rng = rng if rng is not None else np.random.default_rng()
    half = rng.uniform(*HALF_EXTENT_RANGE) * size
    cx, cy = rng.uniform(half, size - half, size=2)
    image = Image.new("RGB", (size, size), PALETTE[bg])
    draw = ImageDraw.Draw(image)
    box = [cx - half, cy - half, cx + half, cy + half]
    if shape == "circle":
        draw.ellipse(box, fill=PALETTE[fg])
    elif shape == "square":
        draw.rectangle(box, fill=PALETTE[fg])
    else:
        draw.polygon([(cx, cy - half), (cx + half, cy + half), (cx - half, cy + half)], fill=PALETTE[fg])
    return image


def all_combos() -> list[tuple[str, str, str]]:
    """Every valid ``(shape, fg, bg)`` triple."""
    return [(s, f, b) for s in SHAPES for f, b in itertools.permutations(COLORS, 2)]


def split_prompts(seed: int = 0) -> tuple[list[str], list[str]]:
    """``(train_prompts, eval_prompts)``: 112 train and 56 eval prompts; no eval triple is in train.

    For each ordered colour pair one shape is held out; which one is a seeded, balanced draw (each
    shape is held out for 18 or 19 pairs).
    """
    rng = np.random.default_rng(seed)
    pairs = list(itertools.permutations(COLORS, 2))
    held_shape = rng.permutation(np.resize(np.arange(len(SHAPES)), len(pairs)))
    train, held = [], []
    for (fg, bg), k in zip(pairs, held_shape):
        for j, shape in enumerate(SHAPES):
            (held if j == k else train).append(caption(shape, fg, bg))
    return train, held


def write_prompt_files(out_dir: str | Path = PROMPT_DIR, seed: int = 0) -> tuple[Path, Path]:
    """Write ``train.txt`` and ``eval.txt`` (one prompt per line) from ``split_prompts(seed)``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, prompts in zip(("train", "eval"), split_prompts(seed)):
        path = out_dir / f"{name}.txt"
        path.write_text("\n".join(prompts) + "\n")
        paths.append(path)
    return paths[0], paths[1]


def make_batch(
    rng: np.random.Generator, batch_size: int, prompts: Sequence[str], size: int = 32
) -> tuple[np.ndarray, list[str]]:
    """Render ``batch_size`` images for prompts drawn uniformly from ``prompts``.

    Returns a ``uint8`` array ``(B, size, size, 3)`` and the captions.
    """
    chosen = [prompts[i] for i in rng.integers(len(prompts), size=batch_size)]
    images = np.stack([np.asarray(render(*parse_caption(p), size=size, rng=rng)) for p in chosen])
    return images, chosen


def iter_batches(
    batch_size: int, prompts: Sequence[str] | None = None, size: int = 32, seed: int = 0
) -> Iterator[tuple[np.ndarray, list[str]]]:
    """Endless seeded stream of ``make_batch`` results (train prompts of split 0 by default)."""
    prompts = list(prompts) if prompts is not None else split_prompts(0)[0]
    rng = np.random.default_rng(seed)
    while True:
        yield make_batch(rng, batch_size, prompts, size)

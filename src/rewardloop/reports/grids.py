"""PNG contact sheets of an iteration's images with their prompts and rewards (for the report and MLflow).

One row per prompt (at most ``max_prompts``, in table order), one column per image of that prompt
(at most ``max_images``, by group/seed), each cell labelled with its combined reward.
"""

from __future__ import annotations

import textwrap

import pandas as pd

from rewardloop.artifacts import atomic_path, decode_image, read_table

CELL = 128        # images are upscaled (nearest) to this size, so 32 px samples stay readable
LABEL_H = 16      # reward line under each image
PROMPT_W = 220    # prompt text column on the left


def load_scored(table_path, scores_path=None) -> pd.DataFrame:
    """Images + prompt + reward: eval.parquet holds all three, samples.parquet needs scores.parquet."""
    frame = read_table(table_path, required=["sample_id", "prompt_id", "prompt", "image"]).to_pandas()
    if scores_path is not None:
        scores = read_table(scores_path, required=["sample_id", "reward"]).to_pandas()
        frame = frame.merge(scores[["sample_id", "reward"]], on="sample_id", how="left")
    return frame


def render_grid(frame: pd.DataFrame, title: str, max_prompts: int = 8, max_images: int = 8):
    """A PIL image: rows = prompts, columns = that prompt's images, reward under each."""
    from PIL import Image, ImageDraw, ImageFont

    font = _font(11)
    title_font = _font(13)
    order = list(dict.fromkeys(frame.prompt_id))[:max_prompts]
    sort_key = "group" if "group" in frame else "sample_id"
    rows = [frame[frame.prompt_id == pid].sort_values(sort_key).head(max_images) for pid in order]
    n_cols = max((len(r) for r in rows), default=1)
    width = PROMPT_W + n_cols * CELL
    row_h = CELL + LABEL_H
    height = 24 + max(1, len(rows)) * row_h
    sheet = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(sheet)
    draw.text((6, 5), title, fill="black", font=title_font)
    for r, group in enumerate(rows):
        top = 24 + r * row_h
        prompt = str(group.prompt.iloc[0])
        lines = textwrap.wrap(prompt, width=32)[:7]
        draw.multiline_text((6, top + 4), "\n".join(lines), fill="black", font=font, spacing=2)
        for c, (_, row) in enumerate(group.iterrows()):
            image = decode_image(row["image"], f"grid: sample {row['sample_id']}")
            image = image.resize((CELL, CELL), Image.NEAREST)
            left = PROMPT_W + c * CELL
            sheet.paste(image, (left, top))
            if "reward" in row and pd.notna(row["reward"]):
                draw.text((left + 4, top + CELL + 1), f"r={row['reward']:.3f}", fill="black", font=font)
    return sheet


def write_grid(frame: pd.DataFrame, title: str, path, **kwargs) -> None:
    sheet = render_grid(frame, title, **kwargs)
    with atomic_path(path) as tmp:
        sheet.save(tmp, format="PNG")


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType sizes
        return ImageFont.load_default()

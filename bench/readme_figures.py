"""The README's before/after figure: held-out eval images of the base model and the last iteration.

Usage: python bench/readme_figures.py results docs/images/before_after.png
Rows are held-out prompts; the left block is the base model, the right block the last iteration,
with the same seeds (eval sampling is deterministic), so each pair of cells differs only by the
trained LoRA.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pandas as pd
from PIL import Image, ImageDraw

SCALE, SEEDS, PROMPTS, LABEL_W, GAP = 3, 4, 8, 240, 16


def tile(cell) -> Image.Image:
    image = Image.open(io.BytesIO(cell["bytes"])).convert("RGB")
    return image.resize((image.width * SCALE, image.height * SCALE), Image.NEAREST)


def main(results: str, out: str) -> None:
    results = Path(results)
    last = sorted(results.glob("iter_*/eval.parquet"))[-1]
    base, final = pd.read_parquet(results / "base/eval.parquet"), pd.read_parquet(last)
    ids = base.drop_duplicates("prompt_id").prompt_id.tolist()
    # spread over the file, shifting by one each row so consecutive rows show different shapes
    prompts = [ids[min(len(ids) - 1, k * len(ids) // PROMPTS + k % 3)] for k in range(min(PROMPTS, len(ids)))]
    side = tile(base.image.iloc[0]).width
    width = LABEL_W + 2 * SEEDS * side + GAP
    canvas = Image.new("RGB", (width, 24 + len(prompts) * side), "white")
    draw = ImageDraw.Draw(canvas)
    draw.text((LABEL_W, 6), f"base model (reward {base.reward.mean():.3f})", fill="black")
    draw.text((LABEL_W + SEEDS * side + GAP, 6), f"{last.parent.name} (reward {final.reward.mean():.3f})", fill="black")
    for row, prompt_id in enumerate(prompts):
        y = 24 + row * side
        for block, frame in enumerate((base, final)):
            cells = frame[frame.prompt_id == prompt_id].sort_values("group").head(SEEDS)
            for col, (cell, reward) in enumerate(zip(cells.image, cells.reward)):
                x = LABEL_W + block * (SEEDS * side + GAP) + col * side
                canvas.paste(tile(cell), (x, y))
                draw.text((x + 2, y + 2), f"{reward:.2f}", fill="white", stroke_width=1, stroke_fill="black")
        draw.text((4, y + side // 2 - 6), base[base.prompt_id == prompt_id].prompt.iloc[0], fill="black")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])

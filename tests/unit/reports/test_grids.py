"""rewardloop.reports.grids: the contact sheet of an iteration's images (a row per prompt, a column per image, the
reward under each), from samples.parquet + scores.parquet or from eval.parquet alone."""

from __future__ import annotations

import pandas as pd
from PIL import Image

from rewardloop.reports import grids
from rewardloop.artifacts import provenance, write_table
from rewardloop.stages.common import to_arrow

from image_tables import image_frame, write_images


def test_load_scored_joins_the_rewards_of_scores_parquet_by_sample(tmp_path):
    frame = image_frame(["red", "blue"], prompts=2)
    write_images(frame, tmp_path / "samples.parquet")
    scores = pd.DataFrame({"sample_id": frame.sample_id[::-1], "reward": [4.0, 3.0, 2.0, 1.0]})
    write_table(to_arrow(scores), tmp_path / "scores.parquet", meta=provenance({}, 0, "m"))
    loaded = grids.load_scored(tmp_path / "samples.parquet", tmp_path / "scores.parquet")
    assert loaded.sample_id.tolist() == frame.sample_id.tolist() and loaded.reward.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert "reward" not in grids.load_scored(tmp_path / "samples.parquet").columns


def test_the_sheet_has_a_row_per_prompt_and_a_cell_per_image_each_upscaled_in_place(tmp_path):
    frame = image_frame(["red", "blue", "lime"], prompts=3)
    frame["reward"] = 0.5
    sheet = grids.render_grid(frame, "iteration 0", max_prompts=2, max_images=2)
    assert sheet.size == (grids.PROMPT_W + 2 * grids.CELL, 24 + 2 * (grids.CELL + grids.LABEL_H))
    # cell (row r, column c) shows image c of prompt r, nearest-upscaled: its centre pixel is that colour
    for r in range(2):
        for c, colour in enumerate([(255, 0, 0), (0, 0, 255)]):
            centre = (grids.PROMPT_W + c * grids.CELL + grids.CELL // 2, 24 + r * (grids.CELL + grids.LABEL_H) + grids.CELL // 2)
            assert sheet.getpixel(centre) == colour


def test_write_grid_saves_a_png(tmp_path):
    grids.write_grid(image_frame(["red"], prompts=1), "eval", tmp_path / "grid.png")
    with Image.open(tmp_path / "grid.png") as image:
        assert image.format == "PNG" and image.size == (grids.PROMPT_W + grids.CELL, 24 + grids.CELL + grids.LABEL_H)
    assert [p.name for p in tmp_path.iterdir()] == ["grid.png"]

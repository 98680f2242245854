"""rewardloop.stages.health: rule health's table of image-health statistics per source of one folder."""

from __future__ import annotations

import pytest

from rewardloop.artifacts import ArtifactError, read_provenance, read_table
from rewardloop.monitors.image_health import STATISTICS
from rewardloop.stages import health

from image_tables import image_frame, write_images


def test_one_row_per_source_with_its_image_count_and_statistics(tmp_path):
    write_images(image_frame(["black", "black"], prompts=3), tmp_path / "eval.parquet", model="tiny@lora-1")
    write_images(image_frame(["white", "red"], prompts=2), tmp_path / "samples.parquet")
    rows = health.run({"eval": tmp_path / "eval.parquet", "rollout": tmp_path / "samples.parquet"}, 1,
                      tmp_path / "health.parquet")
    assert [(r["iteration"], r["source"], r["images"]) for r in rows] == [(1, "eval", 6), (1, "rollout", 4)]
    assert set(STATISTICS) <= set(rows[0])
    eval_row, rollout_row = rows
    assert eval_row["dark_fraction"] == 1.0 and eval_row["bright_fraction"] == 0.0
    assert eval_row["colour_entropy"] == 0.0 and eval_row["diversity"] == 0.0  # one flat colour, same every seed
    assert rollout_row["bright_fraction"] == pytest.approx(0.5)  # the white half
    assert rollout_row["saturation"] == pytest.approx(0.5)  # red 1, white 0
    assert rollout_row["diversity"] > 0
    assert read_table(tmp_path / "health.parquet").to_pylist() == rows
    meta = read_provenance(tmp_path / "health.parquet")
    assert meta["iteration"] == 1 and meta["model"] == "tiny@lora-1"  # the eval images' model


def test_the_base_folder_has_no_iteration_in_its_provenance(tmp_path):
    write_images(image_frame(["grey"]), tmp_path / "eval.parquet", iteration=None)
    rows = health.run({"eval": tmp_path / "eval.parquet"}, -1, tmp_path / "health.parquet")
    assert [r["iteration"] for r in rows] == [-1]
    assert read_provenance(tmp_path / "health.parquet")["iteration"] is None


def test_a_table_without_images_is_refused_naming_the_file(tmp_path):
    write_images(image_frame(["grey"]).drop(columns="image"), tmp_path / "eval.parquet")
    with pytest.raises(ArtifactError, match=r"eval\.parquet: missing column\(s\) image"):
        health.run({"eval": tmp_path / "eval.parquet"}, 0, tmp_path / "health.parquet")

"""rewardloop.stages.rescore: one folder's rollouts and eval images scored with a held-out gold reward,
sharded as score.shards splits them and gathered back into what one job writes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rewardloop.artifacts import decode_image, read_provenance, read_table
from rewardloop.rewards.jpeg import jpeg_size_kb
from rewardloop.stages import rescore

from image_tables import image_frame, write_images

GOLD = {"gold": {"jpeg_incompressibility": 1.0}, "score": {"batch_size": 2}}


@pytest.fixture
def folder(tmp_path):
    write_images(image_frame(["red", "blue", "white"], prompts=2), tmp_path / "samples.parquet")
    # an eval table written before the iteration column existed
    write_images(image_frame(["black", "green"], prompts=1, prefix="eval").drop(columns="iteration"),
                 tmp_path / "eval.parquet", model="tiny@lora-0")
    return tmp_path


def tables(folder):
    return {"rollout": str(folder / "samples.parquet"), "eval": str(folder / "eval.parquet")}


def test_every_image_gets_the_gold_reward_with_its_source_and_the_means_per_source(folder):
    metrics = rescore.run(GOLD, tables(folder), 0, folder / "rescore/jpeg.parquet", folder / "rescore/jpeg.json",
                          progress=False)
    scored = read_table(folder / "rescore/jpeg.parquet").to_pandas()
    assert scored.source.tolist() == ["rollout"] * 6 + ["eval"] * 2
    assert "reward" not in scored.columns and (scored.iteration == 0).all()
    images = pd.concat([read_table(folder / name).to_pandas() for name in ("samples.parquet", "eval.parquet")])
    expected = [jpeg_size_kb(decode_image(cell, "test")) for cell in images.image]
    assert scored.reward_jpeg_incompressibility.tolist() == pytest.approx(expected)
    assert metrics == json.loads((folder / "rescore/jpeg.json").read_text())
    assert metrics["gold/jpeg_incompressibility/mean"] == pytest.approx(sum(expected[6:]) / 2)
    assert metrics["gold/jpeg_incompressibility/rollout_mean"] == pytest.approx(sum(expected[:6]) / 6)
    assert read_provenance(folder / "rescore/jpeg.parquet")["model"] == "tiny@lora-0"


def test_the_gathered_shards_equal_the_unsharded_job(folder):
    whole = rescore.run(GOLD, tables(folder), 0, folder / "whole.parquet", folder / "whole.json", progress=False)
    parts = [rescore.run(GOLD, tables(folder), 0, folder / f"s{i}.parquet", folder / f"s{i}.json", progress=False,
                         shard=i, shards=3) for i in range(3)]
    assert [p["shard"] for p in parts] == [0, 1, 2]
    gathered = rescore.gather(GOLD, [folder / f"s{i}.parquet" for i in range(3)],
                              [folder / f"s{i}.json" for i in range(3)], folder / "g.parquet", folder / "g.json")
    assert read_table(folder / "g.parquet").equals(read_table(folder / "whole.parquet"))
    for key in ("gold/jpeg_incompressibility/mean", "gold/jpeg_incompressibility/rollout_mean"):
        assert gathered[key] == pytest.approx(whole[key])
    assert gathered["shards"] == 3 and gathered["iteration"] == 0

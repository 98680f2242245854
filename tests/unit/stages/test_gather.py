"""rewardloop.stages.gather: generate's and score's shards joined into what one unsharded job writes."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from rewardloop.artifacts import read_table, read_tensors, write_json, write_table, provenance, write_tensors
from rewardloop.runtime.sharding import ShardError
from rewardloop.stages import gather
from rewardloop.stages.common import to_arrow

from image_tables import image_frame, write_images


def test_samples_shards_join_in_order_with_their_tensors_and_summed_metrics(tmp_path):
    frame = image_frame(["red", "blue"], prompts=3)
    shards = [frame.iloc[:2], frame.iloc[2:]]
    for i, part in enumerate(shards):
        write_images(part, tmp_path / f"samples{i}.parquet")
        tensors = {f"latents/{sid}": torch.full((4, 2, 2), float(k)) for k, sid in enumerate(part.sample_id)}
        tensors["prompt_embeds/p1"] = torch.ones(3)  # a prompt both shards encode: equal in both
        write_tensors(tensors, tmp_path / f"latents{i}.safetensors", meta={"iteration": 0})
        write_json({"iteration": 0, "samples": len(part), "perf/rollout_time": 1.5 + i, "perf/model_load_time": 1.0},
                   tmp_path / f"m{i}.json")
    gather.samples([tmp_path / f"samples{i}.parquet" for i in range(2)],
                   [tmp_path / f"latents{i}.safetensors" for i in range(2)], [tmp_path / f"m{i}.json" for i in range(2)],
                   tmp_path / "samples.parquet", tmp_path / "latents.safetensors", tmp_path / "m.json")
    assert read_table(tmp_path / "samples.parquet").to_pandas().sample_id.tolist() == frame.sample_id.tolist()
    tensors = read_tensors(tmp_path / "latents.safetensors")
    assert set(tensors) == {f"latents/{sid}" for sid in frame.sample_id} | {"prompt_embeds/p1"}
    assert json.loads((tmp_path / "m.json").read_text()) == {
        "perf/model_load_time": 2.0, "perf/rollout_time": 4.0, "samples": 6, "iteration": 0, "shards": 2,
        "prompts": 3}


def test_score_shards_join_with_the_reward_statistics_of_the_whole(tmp_path):
    scores = pd.DataFrame({"sample_id": list("abcd"), "prompt_id": ["p", "p", "q", "q"], "reward": [1.0, 2.0, 3.0, 6.0]})
    for i in range(2):
        write_table(to_arrow(scores.iloc[2 * i: 2 * i + 2]), tmp_path / f"s{i}.parquet", meta=provenance({}, 0, "m"))
        write_json({"perf/score_time": 0.25}, tmp_path / f"m{i}.json")
    gather.scores([tmp_path / "s0.parquet", tmp_path / "s1.parquet"], [tmp_path / "m0.json", tmp_path / "m1.json"],
                  tmp_path / "scores.parquet", tmp_path / "m.json")
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert read_table(tmp_path / "scores.parquet").to_pandas().equals(scores)
    assert metrics["perf/score_time"] == 0.5 and metrics["shards"] == 2
    assert metrics["rollout/reward/raw_mean"] == pytest.approx(3.0)
    assert metrics["rollout/reward/raw_std"] == pytest.approx(float(scores.reward.std(ddof=0)))


def test_shards_of_different_runs_are_refused_naming_the_file(tmp_path):
    frame = image_frame(["red"], prompts=2)
    write_images(frame.iloc[:1], tmp_path / "a.parquet", model="run-a")
    write_images(frame.iloc[1:], tmp_path / "b.parquet", model="run-b")
    with pytest.raises(ShardError, match=r"b\.parquet: provenance differs from .*a\.parquet"):
        gather.scores([tmp_path / "a.parquet", tmp_path / "b.parquet"], [], tmp_path / "s.parquet", tmp_path / "m.json")

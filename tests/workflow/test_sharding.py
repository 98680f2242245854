"""Sharded generate/score (scatter/gather jobs) give the unsharded artifacts, byte for byte."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from safetensors.torch import load_file

from rewardloop.artifacts import read_provenance
from rewardloop.runtime.sharding import ShardError, shard_rows

from workflow_helpers import snakemake, tiny_overlay, write_overlay


def test_shards_are_runs_of_whole_batches():
    slices = [shard_rows(18, 4, 3, k) for k in range(3)]  # 5 batches: 1 + 2 + 2
    assert slices == [slice(0, 4), slice(4, 12), slice(12, 18)]
    assert shard_rows(18, 4, 1, 0) == slice(0, 18)
    with pytest.raises(ShardError, match="generate.shards: 6 shards but only 5 batch"):
        shard_rows(18, 4, 6, 0, key="generate.shards")


GOLD = "rescore/jpeg_compressibility"  # a gold reward's rescoring of the base model's eval images, sharded like scoring


def run_scores(tmp_path, tiny_model, name, generate_shards, score_shards):
    work = tmp_path / name
    work.mkdir()
    write_overlay(work, tiny_overlay(
        tiny_model, iterations=1, tracking={"enabled": False},
        generate={"prompts_per_iteration": 4, "images_per_prompt": 2, "steps": 2, "batch_size": 2,
                  "shards": generate_shards},
        score={"batch_size": 2, "shards": score_shards}, gold_rewards={"jpeg_compressibility": 1.0},
    ))
    snakemake(work, "results/iter_000/scores.parquet", f"results/base/{GOLD}.parquet")
    return work / "results/iter_000"


@pytest.mark.workflow
def test_sharded_rollout_and_scoring_equal_the_unsharded_run(tmp_path, tiny_model):
    whole = run_scores(tmp_path, tiny_model, "whole", 1, 1)
    sharded = run_scores(tmp_path, tiny_model, "sharded", 3, 2)
    assert sorted(p.name for p in (sharded / "shards").iterdir()) == [
        "generate_00", "generate_01", "generate_02", "score_00", "score_01"]
    for name in ("samples.parquet", "scores.parquet"):
        a, b = pq.read_table(whole / name), pq.read_table(sharded / name)
        assert a.num_rows == 8 and a.equals(b), name  # every column, PNG bytes included
        assert read_provenance(whole / name) == read_provenance(sharded / name)
    latents_a, latents_b = load_file(whole / "latents.safetensors"), load_file(sharded / "latents.safetensors")
    assert latents_a.keys() == latents_b.keys()
    assert all(latents_a[k].equal(latents_b[k]) for k in latents_a)
    metrics_a, metrics_b = (json.loads((d / "metrics/score.json").read_text()) for d in (whole, sharded))
    assert metrics_b["shards"] == 2
    assert metrics_a["rollout/reward/raw_mean"] == metrics_b["rollout/reward/raw_mean"]
    generated = json.loads((sharded / "metrics/generate.json").read_text())
    assert (generated["samples"], generated["prompts"], generated["shards"]) == (8, 4, 3)
    whole_base, sharded_base = whole.parent / "base", sharded.parent / "base"
    assert sorted(p.name for p in (sharded_base / "shards").iterdir()) == ["rescore_00", "rescore_01"]
    assert not (whole_base / "shards").exists()
    a, b = pq.read_table(whole_base / f"{GOLD}.parquet"), pq.read_table(sharded_base / f"{GOLD}.parquet")
    assert a.num_rows == len(pq.read_table(whole_base / "eval.parquet")) > 2 and a.equals(b)
    gold_a, gold_b = (json.loads((d / f"{GOLD}.json").read_text()) for d in (whole_base, sharded_base))
    assert gold_b["shards"] == 2 and gold_a["gold/jpeg_compressibility/mean"] == pytest.approx(
        gold_b["gold/jpeg_compressibility/mean"], abs=1e-12)


def run_grpo_rollouts(tmp_path, model, family, name, shards):
    work = tmp_path / name
    work.mkdir()
    write_overlay(work, tiny_overlay(
        model, iterations=1, tracking={"enabled": False}, model={"family": family}, train={"loss": "grpo"},
        generate={"prompts_per_iteration": 4, "images_per_prompt": 2, "steps": 3, "batch_size": 2,
                  "shards": shards, "sde": {"noise_level": 0.7, "num_sde_steps": 1}},
        score={"batch_size": 2},
    ))
    snakemake(work, "results/iter_000/latents.safetensors")
    return work / "results/iter_000"


@pytest.mark.workflow
@pytest.mark.parametrize("family, fixture", [("sd15", "tiny_model"), ("sd3", "tiny_sd3_model")])
def test_sharded_grpo_rollouts_equal_the_unsharded_run(tmp_path, request, family, fixture):
    """The SDE step selection is sliced with the rows: trajectories, conditioning and images match."""
    model = request.getfixturevalue(fixture)
    whole = run_grpo_rollouts(tmp_path, model, family, "whole", 1)
    sharded = run_grpo_rollouts(tmp_path, model, family, "sharded", 2)
    samples_a, samples_b = pq.read_table(whole / "samples.parquet"), pq.read_table(sharded / "samples.parquet")
    assert samples_a.equals(samples_b)
    expected = "flow_sde" if family == "sd3" else "ddim_recorded"
    assert set(samples_a.column("sampler").to_pylist()) == {expected}
    latents_a, latents_b = load_file(whole / "latents.safetensors"), load_file(sharded / "latents.safetensors")
    assert latents_a.keys() == latents_b.keys()
    assert all(latents_a[k].equal(latents_b[k]) for k in latents_a)
    keys = set(latents_a)
    assert sum(k.startswith("trajectory/") and k.endswith("/log_probs") for k in keys) == 8  # every sample
    assert {"empty_prompt/prompt_embeds", "rollout/guidance_scale"} <= keys
    assert any(k.startswith("prompt_embeds/") for k in keys)
    assert (family == "sd3") == any(k.startswith("pooled_embeds/") for k in keys)

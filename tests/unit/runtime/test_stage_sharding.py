"""How the rules name and place a stage's work, whole or in shards (src/rewardloop/runtime/sharding.py)."""

from __future__ import annotations

from rewardloop.runtime.sharding import StageSharding


def shard_of(wildcards):
    return int(wildcards.shard)


def test_a_whole_stage_is_one_rule_writing_the_stages_files():
    whole = StageSharding("generate", 1, shard_of)
    assert (whole.sharded, whole.work_rule) == (False, "generate")
    assert whole.output("results/iter_{it}", "samples.parquet") == "results/iter_{it}/samples.parquet"
    assert whole.output("results/iter_{it}", "x.json", whole="results/iter_{it}/metrics/x.json") == \
        "results/iter_{it}/metrics/x.json"
    assert whole.params() == {} and whole.job("generate") == "generate"


def test_a_sharded_stage_writes_each_shards_folder_and_the_gather_reads_them_in_order():
    sharded = StageSharding("score", 3, shard_of)
    assert (sharded.sharded, sharded.work_rule) == (True, "score_shard")
    assert sharded.output("results/iter_{it}", "scores.parquet") == "results/iter_{it}/shards/score_{shard}/scores.parquet"
    assert sharded.params() == {"shard": shard_of, "shards": 3}
    assert sharded.job("score") == "score_{shard}"
    assert sharded.gathered("results/iter_001", "scores.parquet") == [
        f"results/iter_001/shards/score_{k:02d}/scores.parquet" for k in range(3)]

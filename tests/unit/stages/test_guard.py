"""rewardloop.stages.guard: rule guard's verdict on an iteration's eval images against the base model's,
from the files the health and rescore stages write; guard.stop fails the job and leaves the stop file."""

from __future__ import annotations

import json

import pytest

from rewardloop.artifacts import write_json
from rewardloop.stages import guard, health

from image_tables import image_frame, write_images

THRESHOLDS = {"dark_fraction_rise": 0.3, "bright_fraction_rise": 0.3, "colour_entropy_ratio": None,
              "diversity_ratio": None, "high_frequency_ratio": None, "gold_drop": 0.1}


def folder_files(folder, colours, reward: float, gold: float, iteration: int):
    """A folder's health.parquet (from its eval images), eval metrics and one gold rescore JSON."""
    folder.mkdir()
    write_images(image_frame(colours), folder / "eval.parquet", iteration=iteration)
    health.run({"eval": folder / "eval.parquet"}, iteration, folder / "health.parquet")
    write_json({"eval/reward/mean": reward}, folder / "eval_metrics.json")
    write_json({"gold/hps/mean": gold}, folder / "hps.json")
    return folder


def judge(tmp_path, colours, reward, gold, stop=False):
    base = folder_files(tmp_path / "base", ["red", "white"], reward=1.0, gold=0.5, iteration=-1)
    it = folder_files(tmp_path / "iter_002", colours, reward=reward, gold=gold, iteration=2)
    return guard.run({**THRESHOLDS, "stop": stop}, 2, (base / "health.parquet", it / "health.parquet"),
                     (base / "eval_metrics.json", it / "eval_metrics.json"),
                     {"hps": (base / "hps.json", it / "hps.json")}, it / "guard.json")


def test_healthy_images_and_a_kept_gold_reward_pass(tmp_path):
    result = judge(tmp_path, ["blue", "white"], reward=1.5, gold=0.45)
    assert result == {"iteration": 2, "status": "ok", "stop": False, "breaches": []}
    assert json.loads((tmp_path / "iter_002/guard.json").read_text()) == result


def test_darkened_images_and_a_fallen_gold_reward_are_breaches(tmp_path, capsys):
    result = judge(tmp_path, ["black", "black"], reward=1.5, gold=0.3)
    assert result["status"] == "breach"
    assert [b["check"] for b in result["breaches"]] == ["dark_fraction_rise", "gold_drop (hps)"]
    dark = result["breaches"][0]
    assert (dark["base"], dark["value"], dark["threshold"]) == (0.0, 1.0, 0.3)
    err = capsys.readouterr().err
    assert "REWARD-HACKING GUARD, iteration 2: dark_fraction rose" in err and "(guard.gold_drop)" in err


def test_a_gold_drop_while_the_trained_reward_fell_too_is_not_hacking(tmp_path):
    assert judge(tmp_path, ["blue", "white"], reward=0.5, gold=0.3)["status"] == "ok"


def test_guard_stop_fails_the_job_writing_only_the_stop_file(tmp_path):
    with pytest.raises(guard.GuardStop, match=r"iteration 2 breached 2 guard threshold\(s\).*guard\.stop=false"):
        judge(tmp_path, ["black", "black"], reward=1.5, gold=0.3, stop=True)
    folder = tmp_path / "iter_002"
    assert not (folder / "guard.json").exists()
    stopped = json.loads((folder / "guard_stopped.json").read_text())
    assert stopped["status"] == "breach" and stopped["stop"] is True


def test_a_later_pass_removes_the_stop_file_of_an_earlier_stopped_attempt(tmp_path):
    base = folder_files(tmp_path / "base", ["red", "white"], reward=1.0, gold=0.5, iteration=-1)
    it = folder_files(tmp_path / "iter_002", ["blue", "white"], reward=1.5, gold=0.5, iteration=2)
    (it / "guard_stopped.json").write_text("{}")
    guard.run({**THRESHOLDS, "stop": True}, 2, (base / "health.parquet", it / "health.parquet"),
              (base / "eval_metrics.json", it / "eval_metrics.json"), {}, it / "guard.json")
    assert not (it / "guard_stopped.json").exists() and (it / "guard.json").is_file()

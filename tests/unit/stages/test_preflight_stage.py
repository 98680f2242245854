"""rewardloop.stages.preflight: rule preflight measures the checks its objective declares (here NFT's rollout
guidance, read from samples.parquet; SFT's none) and writes every other one as not applicable; rule
preflight_gate holds the figures against the tolerances and writes preflight.json only when all pass.
(The model-loading checks run in tests/workflow/test_preflight.py's workflow runs.)"""

from __future__ import annotations

import json

import pytest

from objective_checks import config
from rewardloop.objectives.alignment import CHECKS
from rewardloop.stages import preflight

from image_tables import image_frame, write_images


def samples(tmp_path, guidance_scale: float):
    frame = image_frame(["red", "blue"], prompts=3)
    frame["guidance_scale"] = guidance_scale
    write_images(frame, tmp_path / "samples.parquet")
    return tmp_path / "samples.parquet"


def run(tmp_path, cfg, guidance_scale):
    return preflight.run(cfg, samples(tmp_path, guidance_scale), None, None, None, None, tmp_path / "figures.json")


def test_nft_measures_the_rollouts_guidance_and_the_gate_fails_a_cfg_rollout(tmp_path):
    cfg = config("configs/tiny_sd3_nft.yaml")
    report = run(tmp_path, cfg, 4.5)
    assert report == json.loads((tmp_path / "figures.json").read_text())
    assert report["objective"] == "nft" and set(report["checks"]) == set(CHECKS)
    guidance = report["checks"]["rollout_guidance"]
    assert guidance["applies"] and guidance["figures"]["guidance_deviation"] == pytest.approx(3.5)
    assert not report["checks"]["start_loss"]["applies"]
    assert report["checks"]["start_loss"]["reason"].startswith("train.loss nft: only a pair objective")
    with pytest.raises(preflight.PreflightError, match=r"rollout_guidance failed: guidance_deviation = 3\.5, .*"
                                                       r"\(threshold: guidance_deviation <= 1e-06\)"):
        preflight.judge(tmp_path / "figures.json", cfg["preflight"], tmp_path / "preflight.json")
    assert not (tmp_path / "preflight.json").exists()


def test_unguided_rollouts_pass_the_gate_which_writes_preflight_json(tmp_path):
    cfg = config("configs/tiny_sd3_nft.yaml")
    run(tmp_path, cfg, 1.0)
    report = preflight.judge(tmp_path / "figures.json", cfg["preflight"], tmp_path / "preflight.json")
    assert report["passed"] and report["checks"]["rollout_guidance"]["passed"]
    assert json.loads((tmp_path / "preflight.json").read_text()) == report


def test_an_objective_without_checks_has_every_check_not_applicable_and_passes(tmp_path):
    cfg = config("config.yaml", loss="sft")
    report = run(tmp_path, cfg, 5.0)
    assert all(not check["applies"] for check in report["checks"].values())
    assert preflight.judge(tmp_path / "figures.json", cfg["preflight"], tmp_path / "preflight.json")["passed"]

"""The preflight gate (rules/preflight.smk) on real tiny runs: it passes an aligned setup with its figures
in preflight.json, and stops a misaligned one before iteration 0 trains, keeping the rollouts."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import save_file

from rewardloop.artifacts import read_tensors
from rewardloop.config import deep_merge

from workflow_helpers import ROOT, planned_jobs, snakemake, tiny_overlay, write_overlay

pytestmark = pytest.mark.workflow
LORA = "pytorch_lora_weights.safetensors"
TRAINED = f"results/iter_000/train/{LORA}"
CHECKPOINT = f"results/iter_000/checkpoint/{LORA}"
REPORT = "results/iter_000/preflight.json"
FIGURES = "results/iter_000/preflight_figures.json"
PREFLIGHT = Counter({("preflight", ""): 1, ("preflight_gate", ""): 1})


def sd3_overlay(tiny_sd3_model, recipe: str, **generate) -> dict:
    """configs/<recipe>.yaml on a small budget, one iteration."""
    config = yaml.safe_load((ROOT / f"configs/{recipe}.yaml").read_text())
    overlay = tiny_overlay(tiny_sd3_model, iterations=1, tracking={"enabled": False},
                           generate={"prompts_per_iteration": 2, "images_per_prompt": 4, "steps": 4, **generate},
                           train={"batch_size": 8, "gradient_accumulation_steps": 1})
    del overlay["train"]["steps"]  # the update count follows from the samples (and recorded steps)
    return deep_merge(config, overlay)


def grpo_overlay(tiny_sd3_model) -> dict:
    """configs/tiny_sd3_grpo.yaml: CFG 4.5 rollouts, every step SDE."""
    return sd3_overlay(tiny_sd3_model, "tiny_sd3_grpo", sde={"num_sde_steps": 4, "window_range": [0, 4]})


def dpo_overlay(tiny_model, **sections) -> dict:
    overlay = tiny_overlay(tiny_model, iterations=1, tracking={"enabled": False},
                           generate={"prompts_per_iteration": 4, "images_per_prompt": 2, "steps": 2},
                           train={"steps": 2, "batch_size": 2}, eval={"steps": 2})
    return deep_merge(overlay, sections)


def start(tmp_path_factory, name: str, overlay: dict) -> Path:
    work = tmp_path_factory.mktemp(name)
    write_overlay(work, overlay)
    return work


def failed_preflight(work: Path) -> str:
    """Run up to train(0), which must fail in the preflight; its log, and train(0) never ran."""
    with pytest.raises(AssertionError, match="rule preflight_gate failed: PreflightError"):
        snakemake(work, TRAINED)
    assert not (work / REPORT).exists() and (work / FIGURES).is_file()  # the figures are kept
    assert not (work / TRAINED).exists() and not (work / "results/logs/iter_000/train.log").exists()
    return (work / "results/logs/iter_000/preflight_gate.log").read_text()


def figure(log: str, name: str) -> float:
    """A figure the failure message states ("name = value")."""
    message = log.rsplit("rule preflight_gate failed:", 1)[1]
    return float(message.split(f"{name} = ", 1)[1].split(",")[0].split(" ")[0])


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory, tiny_sd3_model) -> Path:
    work = start(tmp_path_factory, "preflight_grpo", grpo_overlay(tiny_sd3_model))
    snakemake(work, TRAINED)
    return work


def test_an_aligned_grpo_rollout_passes_with_its_figures_before_train(grpo_run):
    report = json.loads((grpo_run / REPORT).read_text())
    assert report["objective"] == "grpo" and report["passed"] is True
    ratio, noise0 = report["checks"]["importance_ratio"], report["checks"]["noise_level_0"]
    assert ratio["applies"] and ratio["passed"] and noise0["applies"] and noise0["passed"]
    assert ratio["figures"]["rollouts"] == 4 and ratio["figures"]["recorded_steps"] == 4
    assert ratio["figures"]["log_prob_mean_abs_diff"] < 1e-3
    assert abs(ratio["figures"]["ratio_mean"] - 1) < 1e-3
    assert noise0["figures"]["latent_max_abs_diff"] < 1e-3 < noise0["figures"]["latent_scale"]
    assert ratio["thresholds"] == {"log_prob_mean_abs_diff": 1e-3, "ratio_max_deviation": 1e-3}
    # The checks that are not GRPO's say why, rather than passing.
    assert not report["checks"]["start_loss"]["applies"] and "dpo" in report["checks"]["start_loss"]["reason"]
    # train(0) ran after the preflight (it reads preflight.json).
    assert (grpo_run / TRAINED).stat().st_mtime > (grpo_run / REPORT).stat().st_mtime


def test_a_rollout_misaligned_with_training_cfg_stops_before_train(tmp_path_factory, tiny_sd3_model):
    """The rollouts sample at CFG 4.5; training is told they were sampled at CFG 1 (the recorded
    rollout/guidance_scale it applies), so it re-scores them with another velocity than the rollout's."""
    work = start(tmp_path_factory, "preflight_grpo_cfg", grpo_overlay(tiny_sd3_model))
    snakemake(work, "results/iter_000/advantages.parquet")
    latents = work / "results/iter_000/latents.safetensors"
    stat = latents.stat()
    with safe_open(str(latents), "pt") as f:
        meta = f.metadata()
    tensors = read_tensors(latents)
    assert float(tensors["rollout/guidance_scale"]) == 4.5
    tensors["rollout/guidance_scale"] = torch.tensor(1.0)
    save_file(tensors, str(latents), metadata=meta)
    os.utime(latents, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same file to Snakemake: nothing reruns
    log = failed_preflight(work)
    assert "importance_ratio failed" in log and "different CFG in rollout and training" in log
    assert figure(log, "log_prob_mean_abs_diff") > 1e-3  # the threshold, stated beside it
    assert "threshold: log_prob_mean_abs_diff <= 0.001" in log
    assert "noise_level_0 failed" not in log  # the samplers still agree: only training is misaligned
    for name in ("samples.parquet", "scores.parquet", "advantages.parquet", "latents.safetensors"):
        assert (work / "results/iter_000" / name).is_file()


def test_nft_rollouts_sampled_with_cfg_stop_before_train(tmp_path_factory, tiny_sd3_model):
    """NFT trains the unguided velocity on the rollouts' clean latents: rollouts at CFG 4.5 are refused."""
    work = start(tmp_path_factory, "preflight_nft_cfg", sd3_overlay(tiny_sd3_model, "tiny_sd3_nft", guidance_scale=4.5))
    log = failed_preflight(work)
    assert "rollout_guidance failed" in log and "rollout_guidance_scales = [4.5]" in log
    assert "guidance_deviation = 3.5" in log and "set generate.guidance_scale: 1.0" in log
    figures = json.loads((work / FIGURES).read_text())["checks"]
    assert not figures["importance_ratio"]["applies"] and "nft" in figures["importance_ratio"]["reason"]
    assert (work / "results/iter_000/advantages.parquet").is_file()


@pytest.fixture(scope="module")
def dpo_run(tmp_path_factory, tiny_model) -> Path:
    work = start(tmp_path_factory, "preflight_dpo", dpo_overlay(tiny_model))
    snakemake(work, CHECKPOINT)
    return work


def test_dpo_starts_at_log_2(dpo_run):
    report = json.loads((dpo_run / REPORT).read_text())
    check = report["checks"]["start_loss"]
    assert report["passed"] and check["applies"] and check["passed"]
    assert check["figures"]["start_loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert check["figures"]["pairs"] == 2
    assert not report["checks"]["importance_ratio"]["applies"]


def test_dpo_against_the_base_from_a_warm_start_stops_before_train(tmp_path_factory, tiny_model, dpo_run):
    """model.init_lora (dpo_run's iteration-0 model) with train.dpo.reference base: the policy does not
    start at its reference, so the first pairs' loss is not log 2."""
    work = start(tmp_path_factory, "preflight_dpo_base", dpo_overlay(
        tiny_model, model={"init_lora": str(dpo_run / "results/iter_000/checkpoint")},
        train={"dpo": {"reference": "base"}}))
    log = failed_preflight(work)
    assert "start_loss failed" in log and "a reference that is not the policy" in log
    assert figure(log, "abs_diff") > 1e-3
    assert (work / "results/iter_000/pairs.parquet").is_file()


def planned(work: Path, tmp_path: Path, change: dict) -> Counter:
    path = tmp_path / "change.yaml"
    path.write_text(yaml.safe_dump(change))
    return planned_jobs(snakemake(work, "-n", CHECKPOINT, overlays=(path,)))


def test_a_changed_tolerance_reruns_the_preflight_not_training(dpo_run, tmp_path):
    assert planned(dpo_run, tmp_path, {}) == Counter()
    assert planned(dpo_run, tmp_path, {"preflight": {"loss_tolerance": 0.01}}) == Counter({("preflight_gate", ""): 1})
    # What training reads does rerun it, after its preflight.
    assert planned(dpo_run, tmp_path, {"train": {"dpo": {"beta": 1000}}}) == PREFLIGHT + Counter(
        {("train", "it=000"): 1, ("export", "it=000"): 1})


def test_sft_has_no_preflight_unless_asked(dpo_run, tmp_path):
    """SFT has no check: no job by default; asked for, its report says that no check applies."""
    sft = planned(dpo_run, tmp_path, {"train": {"loss": "sft"}})
    assert ("train", "it=000") in sft and not set(PREFLIGHT) & set(sft)
    forced = planned(dpo_run, tmp_path, {"train": {"loss": "sft"}, "preflight": {"enabled": True}})
    assert set(PREFLIGHT) <= set(forced)


def test_nft_and_awm_rollouts_must_be_sampled_without_cfg():
    """What the NFT/AWM check judges: the rollouts' guidance scales (samples.parquet) against CFG 1."""
    from rewardloop.objectives import alignment, get_objective

    assert get_objective("nft").preflight_checks == get_objective("awm").preflight_checks == ("rollout_guidance",)
    tolerances = {"log_prob_tolerance": 1e-3, "ratio_tolerance": 1e-3, "ode_tolerance": 1e-3, "loss_tolerance": 1e-3}

    def report(*scales):
        return alignment.judge({"objective": "nft", "checks": {
            "rollout_guidance": alignment.rollout_guidance(scales),
            "importance_ratio": alignment.not_applicable("no log-probs")}}, tolerances)

    assert report(1.0, 1.0)["passed"]
    failed = report(1.0, 4.5)
    assert not failed["passed"] and failed["checks"]["rollout_guidance"]["figures"]["guidance_deviation"] == 3.5
    message = alignment.failure_message(failed)
    assert "rollout_guidance failed" in message and "rollout_guidance_scales = [1.0, 4.5]" in message
    assert "generate.guidance_scale: 1.0" in message and "importance_ratio" not in message

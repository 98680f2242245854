"""The GPU benches work before a GPU is at hand: bench/gpu_smoke.py's and bench/gpu_slot.py's CPU modes (tiny
replicas) run each stage and report finite figures."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

import pytest

from workflow_helpers import ROOT


@pytest.mark.workflow
def test_gpu_smoke_runs_on_the_cpu_with_tiny_replicas(tmp_path):
    recipes = "sdxl_pickscore_dpo,sd35m_pickscore_nft"  # a UNet with added conditioning, a flow transformer
    run = subprocess.run([sys.executable, str(ROOT / "bench/gpu_smoke.py"), "--size", "tiny", "--device", "cpu",
                          "--out", str(tmp_path), "--recipes", recipes], capture_output=True, text=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads((tmp_path / "gpu_smoke.json").read_text())
    assert [r["recipe"] for r in rows] == recipes.split(",")
    for row in rows:
        unit = "train_pairs_per_s" if row["family"] == "sdxl" else "train_samples_per_s"
        for key in ("rollout_images_per_s", unit, "forward_tflop", "rollout_tflops", "train_tflops"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["recipe"], key)
        assert row["precision"] == {"sdxl": "fp16", "sd3": "bf16"}[row["family"]]
    assert "MFU rollout" in run.stdout and "total" in run.stdout


@pytest.mark.workflow
def test_the_gpu_slot_rehearses_on_the_cpu_with_tiny_replicas(tmp_path):
    """bench/gpu_slot.py (issue 43's one GPU slot) at tiny size on a flow recipe in bf16: the replica drawn on the
    device; bench/steady_state.py's figures (the load, our rollouts against the bare pipeline on the same loaded
    weights, training from 1 and 3 passes over the samples; a pairs recipe varies the optimizer steps instead,
    `make bench` runs it on SD1.5's DPO); the fidelity check in the recipe's precision and guidance, with and
    without an exported LoRA; the record saved step by step, the replica dropped once its steps ran."""
    recipe = "sd35m_pickscore_nft"
    run = subprocess.run([sys.executable, str(ROOT / "bench/gpu_slot.py"), "--size", "tiny", "--device", "cpu",
                          "--out", str(tmp_path), "--recipes", recipe, "--batches", "1"],
                         capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((tmp_path / "gpu_slot.json").read_text())
    steps = [(step["step"], step["name"]) for step in record["steps"]]
    assert steps == [("replica", "sd3-medium"), ("steady-state", recipe), ("fidelity", "sd3-medium bf16 cfg 1"),
                     ("fidelity", "sd3-medium bf16 cfg 1 exported-lora")], record
    replica, steady, *fidelity = (step["figures"] for step in record["steps"])
    assert replica["gb"] > 0 and replica["build_s"] > 0 and not (tmp_path / "assets" / "replica-sd3-medium").exists()
    for checked in fidelity:  # the SD3.5-M recipe's 10 steps without CFG: a call per step, the first exact
        assert len(checked["latent_errors"]) == 9 and checked["ours_pixel_off"] >= 0
    (row,) = json.loads((tmp_path / "steady_state.json").read_text())
    assert row == steady and row["recipe"] == recipe and row["precision"] == "bf16" and row["train_unit"] == "samples"
    for key in ("load_s", "rollout_images_per_s", "bare_images_per_s", "rollout_vs_bare", "train_per_s",
                "forward_tflop", "rollout_mfu"):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert row["rollout_vs_bare"] == pytest.approx(row["rollout_images_per_s"] / row["bare_images_per_s"])
    lines = [line for line in run.stdout.splitlines() if "ours/bare" in line and "): load" in line]
    assert len(lines) == 1 and "(at full size on a GPU)" in lines[0]
    table = run.stdout[run.stdout.index("recipe  "):].splitlines()  # then the table, a row per recipe
    assert table[2].split()[0] == recipe
    assert f"of the {record['budget_s']:.0f} s budget" in run.stdout


def test_a_slot_step_past_the_budget_is_skipped_and_a_failed_one_recorded(tmp_path):
    """The slot goes on past a failed step (recorded with its error) and starts no step once its budget is spent;
    its record is on disk after every step."""
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_slot

    slot = gpu_slot.Slot(tmp_path, 3600, argparse.Namespace(device="cpu", size="tiny"))
    assert slot.step("replica", "sd15", lambda: {"gb": 1.0}) == {"gb": 1.0}
    assert json.loads((tmp_path / "gpu_slot.json").read_text())["steps"][0]["figures"] == {"gb": 1.0}
    assert slot.step("fidelity", "sd15 fp16", lambda: 1 / 0) is None
    slot.budget_s = 0
    assert slot.step("steady-state", "sd15_pickscore_dpo", lambda: pytest.fail("a step ran past the budget")) is None
    first, failed, skipped = json.loads((tmp_path / "gpu_slot.json").read_text())["steps"]
    assert failed["error"].startswith("ZeroDivisionError") and "figures" not in failed
    assert "budget" in skipped["skipped"] and "seconds" not in skipped
    assert slot.failed == ["fidelity sd15 fp16"]

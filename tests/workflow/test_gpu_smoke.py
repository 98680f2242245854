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
    """bench/gpu_slot.py (issue 43's one GPU slot) at tiny size on a pairs recipe in fp16 and a flow recipe in bf16
    with CFG: each replica drawn on the device; bench/steady_state.py's figures (the load, our rollouts against the
    bare pipeline on the same loaded weights, training from two runs: 1x and 3x the optimizer steps for DPO, 1 and 3
    passes over the samples for GRPO; for DPO the diffusers example's step); the fidelity check in each recipe's
    precision and guidance, with and without an exported LoRA; the record saved step by step, each replica dropped
    once its steps ran."""
    recipes = ["sd15_pickscore_dpo", "sd35m_ocr_grpo"]
    run = subprocess.run([sys.executable, str(ROOT / "bench/gpu_slot.py"), "--size", "tiny", "--device", "cpu",
                          "--out", str(tmp_path), "--recipes", ",".join(recipes), "--batches", "1"],
                         capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((tmp_path / "gpu_slot.json").read_text())
    steps = [(step["step"], step["name"]) for step in record["steps"]]
    assert steps == [("replica", "sd15"), ("steady-state", recipes[0]), ("fidelity", "sd15 fp16 cfg 7.5"),
                     ("fidelity", "sd15 fp16 cfg 7.5 exported-lora"), ("replica", "sd3-medium"),
                     ("steady-state", recipes[1]), ("fidelity", "sd3-medium bf16 cfg 4.5"),
                     ("fidelity", "sd3-medium bf16 cfg 4.5 exported-lora")], record
    figures = {(step["step"], step["name"]): step["figures"] for step in record["steps"]}
    for family, steps_checked in (("sd15", 6), ("sd3-medium", 10)):
        assert figures["replica", family]["gb"] > 0 and not (tmp_path / "assets" / f"replica-{family}").exists()
        checks = [value for (kind, name), value in figures.items() if kind == "fidelity" and name.startswith(family)]
        assert [len(c["latent_errors"]) for c in checks] == [steps_checked - 1] * 2  # a call per step, the first exact
    rows = json.loads((tmp_path / "steady_state.json").read_text())
    assert rows == [figures["steady-state", name] for name in recipes]
    for row, precision, unit in zip(rows, ("fp16", "bf16"), ("pairs", "samples")):
        assert row["precision"] == precision and row["train_unit"] == unit
        for key in ("load_s", "rollout_images_per_s", "bare_images_per_s", "rollout_vs_bare", "train_per_s",
                    "forward_tflop", "rollout_mfu"):
            assert math.isfinite(row[key]) and row[key] > 0, key
        assert row["rollout_vs_bare"] == pytest.approx(row["rollout_images_per_s"] / row["bare_images_per_s"])
    dpo = rows[0]  # the example's step: ours plus its per-step encoding, so slower than ours
    assert 0 < dpo["example_pairs_per_s"] < dpo["train_per_s"] and dpo["train_vs_example"] > 1
    assert "example_pairs_per_s" not in rows[1]
    lines = [line for line in run.stdout.splitlines() if "ours/bare" in line and "): load" in line]
    assert len(lines) == 2 and all("(at full size on a GPU)" in line for line in lines)
    assert "the diffusers DPO example's step" in lines[0]
    table = run.stdout[run.stdout.index("recipe  "):].splitlines()  # then the table, a row per recipe
    assert [line.split()[0] for line in table[2:4]] == recipes
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

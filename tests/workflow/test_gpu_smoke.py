"""bench/gpu_smoke.py works before a GPU is at hand: its CPU mode (tiny replicas) runs each stage and
reports finite figures, and its FLOP count of a denoiser forward matches count_dpo_flops' method."""

from __future__ import annotations

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
def test_steady_state_bench_runs_on_the_cpu_with_tiny_replicas(tmp_path):
    """bench/steady_state.py (issue 43's steady-state figures) on a flow recipe in bf16: the load, our rollouts
    against the bare pipeline on the same loaded weights, training from 1 and 3 passes over the samples. (A
    pairs recipe varies the optimizer steps instead: `make bench` runs it on SD1.5's DPO.)"""
    recipe = "sd35m_pickscore_nft"
    run = subprocess.run([sys.executable, str(ROOT / "bench/steady_state.py"), "--size", "tiny", "--device", "cpu",
                          "--out", str(tmp_path), "--recipes", recipe, "--batches", "1"],
                         capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    (row,) = json.loads((tmp_path / "steady_state.json").read_text())
    assert row["recipe"] == recipe and row["precision"] == "bf16" and row["train_unit"] == "samples"
    for key in ("load_s", "rollout_images_per_s", "bare_images_per_s", "rollout_vs_bare", "train_per_s",
                "forward_tflop", "rollout_mfu"):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert row["rollout_vs_bare"] == pytest.approx(row["rollout_images_per_s"] / row["bare_images_per_s"])
    lines = [line for line in run.stdout.splitlines() if "ours/bare" in line and "): load" in line]
    assert len(lines) == 1 and "(at full size on a GPU)" in lines[0]
    table = run.stdout[run.stdout.index("recipe  "):].splitlines()  # then the table, a row per recipe
    assert table[2].split()[0] == recipe

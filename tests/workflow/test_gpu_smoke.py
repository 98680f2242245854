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

"""Guard: the embedded default run (config.yaml through the real workflow, on the shipped tiny model)
writes the same LoRA bytes and the same eval table as the README's, on any x86-64 CPU with AVX2.

The run pins the CPU kernels (config ``cpu_kernels: auto``, runtime/cpu_kernels.py: AVX2, and MKL on its
branch for every vendor), so the figures depend neither on what else the CPU has (AVX-512, AMX) nor on
its vendor: measured on an Intel Xeon with AVX-512 and AMX, and the networks' gradients under an
emulated AMD EPYC (tests/unit/runtime/test_cpu_kernels.py). Under the first pin (MKL's Intel-only AVX2
branch) an AMD EPYC and an Intel Xeon built different models (base 0.475 and 1.013). The model is the one
that ships (resources/models/tiny-sd15, copied where the run looks for it, as a clone has it): the run
plans no build, and its 3 iterations take a few minutes. That the shipped bytes are the builder's is
tests/unit/models/test_shipped_models.py's and tests/workflow/test_shipped_model_rebuild.py's to prove.
"""

from __future__ import annotations

import hashlib
import shutil

import pandas as pd
import pytest
import yaml

from rewardloop.artifacts import read_provenance
from rewardloop.runtime import cpu_kernels

from workflow_helpers import ROOT, snakemake

pytestmark = pytest.mark.workflow

# sha256 of iterations 0, 1, 2's trained LoRA; eval means of base, 0, 1, 2 (README, "What the default run does")
LORAS = ("05bd618e4fa992d83e4a8c10780ae8a8cfd2b7cab31b127171f7991c39048e91",
         "615f2b3c8b14e7ab2c6161a8b90a7aa865e9489d407ff011c1327685a34de8d2",
         "87b73555e55117eaa51ff341a6421c76ace42b51014e760ec4882905ee81e0b9")
EVALS = (0.9645203713299192, 1.1014536709026939, 1.224549092267446, 1.2542252037393544)


@pytest.mark.skipif(not cpu_kernels.has_avx2(), reason="the figures hold on x86-64 CPUs with AVX2")
def test_default_run_gives_the_readmes_bytes_and_figures(tmp_path):
    # The default config as it is, with its prompt files where they live and tracking left on.
    overlay = {"prompts": {k: str(ROOT / f"resources/prompts/{k}.txt") for k in ("train", "eval")}}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(overlay))
    shutil.copytree(ROOT / "resources/models/tiny-sd15", tmp_path / "resources/models/tiny-sd15")
    result = snakemake(tmp_path)
    assert "build_tiny_model" not in result.stdout + result.stderr  # the shipped model, used as it is
    results = tmp_path / "results"
    got = tuple(hashlib.sha256((results / f"iter_{it:03d}/train/pytorch_lora_weights.safetensors").read_bytes())
                .hexdigest() for it in range(3))
    means = tuple(float(pd.read_parquet(results / f"{name}/eval.parquet", columns=["reward"]).reward.mean())
                  for name in ("base", "iter_000", "iter_001", "iter_002"))
    assert read_provenance(results / "iter_002/eval.parquet")["cpu_kernels"] == "avx2"
    assert means == EVALS
    assert got == LORAS

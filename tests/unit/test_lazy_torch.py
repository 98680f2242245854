"""rewardloop.lazy_torch: a snakemake command validates the config and reads the objectives' declarations
without importing torch (1.7 s of every command's start, docs/performance.md), and the lazy module is torch
itself once used."""

from __future__ import annotations

import subprocess
import sys

from rewardloop import lazy_torch
from workflow_helpers import ROOT

WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None  # any `import torch` from here on raises ImportError
import yaml
from rewardloop.config import validate
from rewardloop.objectives import OBJECTIVES

config = validate(yaml.safe_load(open("config.yaml")))
print(sorted(name for name, objective in OBJECTIVES.items() if objective.multi_process))
"""


def test_the_config_and_the_objectives_declarations_need_no_torch():
    result = subprocess.run([sys.executable, "-c", WITHOUT_TORCH], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dpo" in result.stdout and "grpo" in result.stdout  # the declarations were read


def test_the_lazy_module_forwards_to_torch_and_sees_a_patched_attribute(monkeypatch):
    import torch

    assert lazy_torch.torch.zeros(2).tolist() == [0.0, 0.0]
    assert lazy_torch.functional.relu is torch.nn.functional.relu
    monkeypatch.setattr(torch, "marker_for_this_test", 7, raising=False)
    assert lazy_torch.torch.marker_for_this_test == 7  # read from torch at each access, nothing copied

    @lazy_torch.no_grad
    def doubled(x):
        return x * 2

    weight = torch.ones(1, requires_grad=True)
    assert not doubled(weight).requires_grad

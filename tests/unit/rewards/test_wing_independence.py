"""The reward wing imports nothing of the diffusion-model wing.

Rewards score images against prompts; stages.score builds them and rewards.remote serves them, so
they must stay usable (and importable) without the models, samplers, objectives, trainer or stages:
a reward server loads no diffusion code, and a change there cannot break a reward. What the two
wings share lives outside both (rewardloop.shape_domain: the synthetic shapes' colours and captions).

Checked two ways: every import statement of every module under rewards/ (read with ast, those
inside functions too, relative ones resolved; tests/import_graph.py's reader), and what
importing every reward module actually loads, in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from import_graph import imported, modules

MODEL_WING = ("rewardloop.models", "rewardloop.sampling", "rewardloop.objectives", "rewardloop.training",
              "rewardloop.stages")
PACKAGE_MODULES = modules()
REWARD_MODULES = sorted(name for name in PACKAGE_MODULES
                        if name == "rewardloop.rewards" or name.startswith("rewardloop.rewards."))
# Known crossings still to remove, each named with what removes it (strict: the test fails once it is gone).
PENDING: dict[str, str] = {}  # module -> why it still crosses (a strict xfail until it no longer does)


def in_model_wing(module: str) -> bool:
    return any(module == wing or module.startswith(wing + ".") for wing in MODEL_WING)


def test_the_reader_sees_the_wing_and_its_imports():
    assert {"rewardloop.rewards.color_match", "rewardloop.rewards.base", "rewardloop.rewards.ocr"} <= set(
        REWARD_MODULES)
    color_match = imported("rewardloop.rewards.color_match", PACKAGE_MODULES["rewardloop.rewards.color_match"],
                           set(PACKAGE_MODULES))
    assert {"rewardloop.shape_domain", "rewardloop.rewards.base"} <= color_match
    assert in_model_wing("rewardloop.models.tiny.synthetic") and in_model_wing("rewardloop.stages")
    assert not in_model_wing("rewardloop.modelsx") and not in_model_wing("rewardloop.shape_domain")


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=PENDING[name]))
                                  if name in PENDING else name for name in REWARD_MODULES])
def test_no_reward_module_imports_the_model_wing(name):
    crossings = sorted(m for m in imported(name, PACKAGE_MODULES[name], set(PACKAGE_MODULES)) if in_model_wing(m))
    assert not crossings, f"{name} imports {', '.join(crossings)}"


def test_importing_every_reward_module_loads_nothing_of_the_model_wing():
    code = ("import importlib, sys\n"
            f"for name in {REWARD_MODULES!r}:\n"
            "    importlib.import_module(name)\n"
            "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('rewardloop.'))))\n")
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert "rewardloop.rewards.color_match" in loaded
    assert not [m for m in loaded if in_model_wing(m)]

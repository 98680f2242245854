"""What CPS (generate.sde.type: cps) refuses, at startup and in its step helpers."""

from __future__ import annotations

import re

import pytest
import torch

from rewardloop.config import ConfigError, load
from rewardloop.sampling.sde import get_dynamics

from workflow_helpers import ROOT

BASE = ROOT / "configs/tiny_sd3_grpo.yaml"  # 10 steps
LAST = ("generate.sde: a CPS step into sigma 0 (step 9, the last) has no noise and no log-prob; end "
        "window_range at 9 or earlier (or keep candidate_steps below 9)")


def cps(**sde):
    return {"generate": {"sde": {"type": "cps", **sde}}}


@pytest.mark.parametrize("sde, refused", [
    ({"strategy": "sde_window", "num_sde_steps": 2, "window_range": [0, 10]}, True),
    ({"strategy": "sde_window", "num_sde_steps": 2, "window_range": None}, True),
    ({"strategy": "sde_window", "num_sde_steps": 2, "window_range": [0, 9]}, False),
    ({"strategy": "sde_window", "num_sde_steps": 2, "window_range": [3, 9]}, False),
    ({"strategy": "epoch_global_random_choice", "num_sde_steps": 1, "candidate_steps": [2, 9]}, True),
    ({"strategy": "epoch_global_random_choice", "num_sde_steps": 1, "candidate_steps": None}, True),
    ({"strategy": "epoch_global_random_choice", "num_sde_steps": 2, "candidate_steps": [0, 8]}, False),
])
def test_cps_refuses_a_strategy_that_can_record_the_last_step(sde, refused):
    if refused:
        with pytest.raises(ConfigError, match="^" + re.escape(LAST) + "$"):
            load(BASE, cps(**sde))
    else:
        assert load(BASE, cps(**sde))["generate"]["sde"]["type"] == "cps"


@pytest.mark.parametrize("overrides, message", [
    (cps(noise_level=1.2, window_range=[0, 9], num_sde_steps=2),
     "generate.sde.noise_level: with type cps it is a in sin(a pi / 2); must be <= 1"),
    ({"model": {"family": "sd15"}, **cps(noise_level=1.0)},
     "generate.sde.type: cps is a flow-matching step (sd3, flux, qwen_image); sd15 records DDIM steps"),
])
def test_cps_names_the_key_it_refuses(overrides, message):
    base = ROOT / ("config.yaml" if "model" in overrides else "configs/tiny_sd3_grpo.yaml")
    overrides = {k: v for k, v in overrides.items() if k != "model"}
    with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
        load(base, {**overrides, "train": {"loss": "grpo"}})


def test_the_step_helpers_refuse_what_they_cannot_do():
    x = torch.randn(2, 4, 2, 2)
    step = get_dynamics("cps").step
    with pytest.raises(ValueError, match=r"^cps_step: noise is required for a step with std > 0$"):
        step(x, x, 0.9, 0.6, torch.tensor([0.0, 0.1]))
    mean, same = step(x, x, 0.9, 0.6, 0.0)  # std 0: the Euler step, no noise needed
    assert mean is same and torch.allclose(mean, x + (0.6 - 0.9) * x)
    with pytest.raises(ValueError, match=r"^generate\.sde\.type: unknown 'dance' \(expected one of flow_grpo, cps\)$"):
        get_dynamics("dance")

"""Shared fixtures: offline mode, the repository root, a tiny pretrained model built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A briefly pretrained tiny SD1.5-family model (seconds, not minutes: plumbing tests only)."""
    from rewardloop.models.tiny_sd15 import build_tiny_sd15

    out = tmp_path_factory.mktemp("models") / "tiny-sd15"
    build_tiny_sd15(out, seed=0, vae_steps=40, unet_steps=60, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_sdxl_model(tmp_path_factory) -> Path:
    """A random-init tiny SDXL-architecture model (two text encoders, pooled embeds, time ids)."""
    from rewardloop.models.tiny_sdxl import build_tiny_sdxl

    return build_tiny_sdxl(tmp_path_factory.mktemp("models") / "tiny-sdxl", seed=0)


@pytest.fixture(scope="session")
def tiny_sd3_model(tmp_path_factory) -> Path:
    """A briefly pretrained tiny SD3-family model (seconds: plumbing and numerics tests only)."""
    from rewardloop.models.tiny_sd3 import build_tiny_sd3

    out = tmp_path_factory.mktemp("models") / "tiny-sd3"
    build_tiny_sd3(out, seed=0, vae_steps=30, unet_steps=40, progress=False)
    return out


MODEL_FIXTURES = {"tiny_model", "tiny_sdxl_model", "tiny_sd3_model"}


def pytest_collection_modifyitems(items):
    """Mark the tests that need a built tiny model (``-m "not model"``: the seconds-fast tests that
    the mutation run uses, see docs/development.md)."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


@pytest.fixture(autouse=True)
def _restore_torch_determinism():
    """``train.deterministic`` switches torch's deterministic algorithms on for the whole process (a job
    is one process); a test that trains in-process must not leave it on for the tests after it."""
    try:
        import torch
    except ImportError:  # the paddleocr tier's venv has no torch
        yield
        return

    enabled = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(enabled)

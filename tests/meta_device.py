"""A second device on every machine: torch's ``meta`` device (shapes and dtypes, no data).

A policy placed there makes a tensor left on the CPU fail exactly as it fails beside a CUDA model
("not on the expected device"), so the device checks of the losses and the samplers' helpers run
without a GPU. ``meta_items`` is a fixture: a test module uses it after
``from meta_device import meta_items  # noqa: F401``.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from rewardloop.training.policy import Policy

META = torch.device("meta")


class Accelerator:
    """What a loss reads of accelerate's Accelerator: the device, the ranks, autocast (off)."""

    process_index, num_processes = 0, 1

    def __init__(self, device):
        self.device = torch.device(device)

    def autocast(self):
        return contextlib.nullcontext()


def policy_on(device, model, reference=None, dtype=None) -> Policy:
    """The policy a Trainer would build on ``device`` (a separate frozen reference, no adapter)."""
    model = model.to(device=device, dtype=dtype)
    if reference is not None:
        reference = reference.to(device=device, dtype=dtype).requires_grad_(False)
    return Policy(model, Accelerator(device), list(model.parameters()), reference)


@pytest.fixture
def meta_items(monkeypatch):
    """The logged metrics call ``.item()``, which a meta tensor cannot answer: nan instead."""
    item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda self: float("nan") if self.is_meta else item(self))


def on_meta(*shapes):
    return [torch.zeros(shape, device=META) for shape in shapes]

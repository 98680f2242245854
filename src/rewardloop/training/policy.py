"""What an objective's loss may use of the model being trained: the policy, its reference, the device.

The Trainer builds it; objectives call ``policy.module`` (with gradients; the DDP wrapper when
several processes train), ``policy.model`` (the bare denoiser with its adapter), and
``policy.reference()`` (a frozen model: a separate one, or the policy with its adapter disabled).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


class Policy:
    def __init__(self, model, accelerator, trainable: list, reference_model=None, reference_offload: bool = False):
        self.model = model  # the denoiser with its LoRA (or every weight trainable)
        self.module = model  # what the policy's forward goes through: the DDP wrapper once prepared
        self.accelerator = accelerator
        self.trainable = trainable  # the trained parameters, in a fixed order
        self.reference_model = reference_model
        self.reference_offload = reference_offload
        # Further weight sets of the trained parameters that an objective keeps (NFT's "old" policy),
        # each a list in the order of ``trainable``; the train stage loads and saves them.
        self.extra: dict[str, list] = {}

    @property
    def device(self):
        return self.accelerator.device

    @property
    def process_index(self) -> int:
        return self.accelerator.process_index

    @property
    def num_processes(self) -> int:
        return self.accelerator.num_processes

    def autocast(self):
        return self.accelerator.autocast()

    def named_trainable(self) -> list:
        return [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    @contextmanager
    def reference(self) -> Iterator:
        """The frozen reference module: the separate reference model, or the policy's adapter disabled."""
        if self.reference_model is not None and self.reference_offload:
            # Offloaded: on the device only for its forward pass.
            self.reference_model.to(self.device)
            try:
                yield self.reference_model
            finally:
                self.reference_model.to("cpu")
        elif self.reference_model is not None:
            yield self.reference_model
        else:
            self.model.disable_adapters()
            try:
                yield self.model
            finally:
                self.model.enable_adapters()

    @contextmanager
    def swapped_in(self, name: str) -> Iterator:
        """The model with the weight set ``name`` in place of the trained weights (restored on exit)."""
        import torch

        with torch.no_grad():
            saved = [p.detach().clone() for p in self.trainable]
            for p, other in zip(self.trainable, self.extra[name]):
                p.copy_(other)
        try:
            yield self.model
        finally:
            with torch.no_grad():
                for p, value in zip(self.trainable, saved):
                    p.copy_(value)

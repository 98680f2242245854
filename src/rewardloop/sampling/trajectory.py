"""Per-sample records of the stochastic (recorded) steps of a batch of rollouts.

Both GRPO samplers (flow SDE for SD3, DDIM with eta > 0 for SD1.5) record, for every sample and each
of its recorded steps, the step's input and output latents, its constants and its log-prob; this
collects them and stacks each sample's steps into ``[K, ...]`` fp32 tensors on the CPU.
"""

from __future__ import annotations

import torch


class StepRecorder:
    def __init__(self, batch: int):
        self.steps: list[dict[str, list]] = [{} for _ in range(batch)]

    def add(self, selected, **values) -> None:
        """Record one step for the samples with ``selected[i]``; a value is a scalar or a [B, ...] tensor."""
        # each value leaves the device once per step (one copy, one synchronisation), not once per sample
        host = {key: torch.as_tensor(value).detach().float().cpu() for key, value in values.items()}
        for i, flag in enumerate(selected):
            if not flag:
                continue
            for key, value in host.items():
                self.steps[i].setdefault(key, []).append(value[i] if value.ndim > 0 else value)

    def stacked(self) -> list[dict | None]:
        """Each sample's records stacked over its recorded steps (None for a sample without any)."""
        return [{k: torch.stack(v) for k, v in r.items()} if r else None for r in self.steps]

"""rewardloop.sampling.trajectory: the recorder of a rollout's SDE steps, per selected sample."""

from __future__ import annotations

import torch

from rewardloop.sampling.trajectory import StepRecorder


def test_a_0_dim_tensor_is_recorded_as_a_scalar_for_every_selected_sample():
    recorder = StepRecorder(3)
    recorder.add([True, False, True], std=torch.tensor(0.5), x=torch.arange(3.0), t=7)
    records = recorder.stacked()
    assert records[1] is None
    assert records[0]["std"].tolist() == [0.5] and records[2]["std"].tolist() == [0.5]
    assert records[2]["x"].tolist() == [2.0] and records[2]["t"].tolist() == [7.0]

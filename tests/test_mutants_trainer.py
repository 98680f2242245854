"""The Trainer's promises that `make mutation` found unguarded by the fast tests: an update's gradient
is the mean of its micro-batches' (whatever the optimizer makes of its scale), the hooks receive
what they promise, the schedule spans the plan, no checkpoint is written after the last update,
the guard names the first broken weight and the state folder, and the progress bar shows when asked.
Seconds each, on the tiny random-init UNet of test_trainer_mechanics.py.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time

import pytest
import torch

from rewardloop.objectives.dpo import DPO
from rewardloop.training.trainer import TrainingError

from test_trainer_mechanics import NaNWeights, setup


class Debug(DPO):
    """Losses and gradients only (as train.grpo.debug_alignment): the gradients stay on the weights."""

    @property
    def steps_optimizer(self) -> bool:
        return False


def test_an_update_accumulates_the_mean_of_its_micro_batch_gradients(tmp_path):
    """Adam's step hides a scaled gradient; the gradient itself must be the mean over the micro-batches."""
    objective, trainer, data = setup(tmp_path, Debug, steps=1, gradient_accumulation_steps=3)
    expected = [torch.zeros_like(p) for p in trainer.params]
    for micro in range(3):
        loss, _ = objective.loss(trainer.policy, data, (0, micro))
        for total, grad in zip(expected, torch.autograd.grad(loss, trainer.params, allow_unused=True)):
            if grad is not None:
                total += grad / 3
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(objective, data, tmp_path / "state", "fp", progress=False)
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.params))  # no optimizer step
    compared = 0
    for p, grad in zip(trainer.params, expected):
        if grad.abs().max() > 0:
            torch.testing.assert_close(p.grad, grad, rtol=1e-3, atol=1e-6 * float(grad.abs().max()))
            compared += 1
    assert compared > 0


class Recording(DPO):
    """DPO that records what the Trainer passes to the plan and the hooks."""

    def plan(self, data, processes):
        self.calls = [("plan", data, processes)]
        return super().plan(data, processes)

    def start(self, policy, data):
        self.calls.append(("start", policy, data))

    def after_update(self, policy, step):
        self.calls.append(("after_update", policy, step))

    def finish(self, policy, updates):
        self.calls.append(("finish", policy, updates))


def test_the_plan_and_the_hooks_receive_the_data_the_policy_and_the_steps(tmp_path):
    objective, trainer, data = setup(tmp_path, Recording, steps=3)
    trainer.run(objective, data, tmp_path / "state", "fp", progress=False)
    policy = trainer.policy
    assert objective.calls == [("plan", data, 1), ("start", policy, data), ("after_update", policy, 0),
                               ("after_update", policy, 1), ("after_update", policy, 2), ("finish", policy, 3)]


def test_the_schedule_spans_the_plan_and_each_update_is_timed(tmp_path):
    """A linear schedule without warmup decays to 0 over the plan's updates (lr (T - k) / T after update k)."""
    objective, trainer, data = setup(tmp_path, steps=4, lr_scheduler="linear", lr_warmup_steps=0)
    started = time.perf_counter()
    history, _ = trainer.run(objective, data, tmp_path / "state", "fp", progress=False)
    elapsed = time.perf_counter() - started
    lr = objective.train.learning_rate
    assert [h["lr"] for h in history] == pytest.approx([lr * 3 / 4, lr / 2, lr / 4, 0.0])
    assert all(0 < h["time"] <= elapsed for h in history) and sum(h["time"] for h in history) <= elapsed


def saved_step(state_dir) -> int:
    from safetensors import safe_open

    with safe_open(str(state_dir / "state.safetensors"), framework="pt") as fh:
        return json.loads(fh.metadata()["rewardloop_state"])["step"]


def test_checkpoints_every_n_updates_but_not_after_the_last(tmp_path):
    """4 updates, checkpointing_steps 2: a state after update 2 only (the stage saves the model after 4)."""
    objective, trainer, data = setup(tmp_path, steps=4, checkpointing_steps=2)
    trainer.run(objective, data, tmp_path / "state", "fp", progress=False)
    assert saved_step(tmp_path / "state") == 2
    objective, trainer, data = setup(tmp_path, steps=5, checkpointing_steps=2)
    trainer.run(objective, data, tmp_path / "five", "fp", progress=False)
    assert saved_step(tmp_path / "five") == 4


def test_the_guard_names_the_first_broken_weight_and_the_state_folder(tmp_path):
    objective, trainer, data = setup(tmp_path, steps=1)
    named = trainer.policy.named_trainable()
    with torch.no_grad():
        named[3][1].view(-1)[0] = math.nan
        named[7][1].view(-1)[0] = math.inf
    state = tmp_path / "somewhere"
    with pytest.raises(TrainingError) as error:
        trainer.require_finite_weights(5, state)
    assert str(error.value) == (f"iteration 0, step 4: 2 trained tensor(s) became NaN or inf (first: {named[3][0]}); "
                                f"the last good state in {state} is kept and no model is saved")
    for steps, checkpointing_steps in ((3, 1), (1, 100)):  # before a checkpoint, and after the last update
        objective, trainer, data = setup(tmp_path, NaNWeights, steps=steps, checkpointing_steps=checkpointing_steps)
        state = tmp_path / f"state{steps}"
        with pytest.raises(TrainingError, match=r"the last good state in (.*) is kept") as error:
            trainer.run(objective, data, state, "fp", progress=False)
        assert f"the last good state in {state} is kept" in str(error.value)


def test_the_progress_bar_shows_updates_and_the_loss_only_when_asked(tmp_path, capsys):
    objective, trainer, data = setup(tmp_path, steps=2)
    trainer.run(objective, data, tmp_path / "quiet", "fp", progress=False)
    assert "train" not in capsys.readouterr().err
    objective, trainer, data = setup(tmp_path, steps=2)
    trainer.run(objective, data, tmp_path / "shown", "fp")  # the default shows it
    err = capsys.readouterr().err
    assert "train: 100%" in err and "2/2" in err
    assert re.search(r"(step/s|s/step)", err) and re.search(r"loss=-?\d+\.\d{4}\b", err), err


# --- what the Trainer asks of accelerate, the reference and the learning rate ----------------------

class Stop(Exception):
    pass


def test_the_accelerator_takes_the_gpu_when_cuda_is_there_and_the_cpu_otherwise(tmp_path, monkeypatch):
    import accelerate

    asked = []

    def accelerator(**kwargs):
        asked.append(kwargs)
        raise Stop

    objective, _, _ = setup(tmp_path, steps=1)
    from objective_checks import tiny_unet
    from rewardloop.training.trainer import Trainer

    monkeypatch.setattr(accelerate, "Accelerator", accelerator)

    for cuda in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        with pytest.raises(Stop):
            Trainer(objective.train, tiny_unet(), 0, 0)
    precision = objective.train.mixed_precision
    assert asked == [{"mixed_precision": precision, "cpu": True}, {"mixed_precision": precision, "cpu": False}]


class Placed(torch.nn.Linear):
    """A stand-in reference model that records where it is moved."""

    def __init__(self):
        super().__init__(2, 2)
        self.moves = []

    def to(self, *args, **kwargs):
        self.moves.append(str(args[0] if args else kwargs.get("device")))
        return super().to(*args, **kwargs)


@pytest.mark.parametrize("offload", [False, True])
def test_a_separate_reference_is_frozen_and_offloaded_between_its_passes(tmp_path, offload):
    objective, _, _ = setup(tmp_path, steps=1, reference_offload=offload)
    from objective_checks import tiny_unet
    from rewardloop.training.trainer import Trainer

    reference = Placed()
    trainer = Trainer(objective.train, tiny_unet(), 0, 0, reference)
    assert not any(p.requires_grad for p in reference.parameters()) and not reference.training
    assert reference.moves == (["cpu"] if offload else [])
    with trainer.policy.reference() as module:
        assert module is reference
    assert reference.moves == (["cpu", "cpu", "cpu"] if offload else [])  # to the device (the CPU here), back


def test_scale_lr_multiplies_by_the_effective_batch(tmp_path):
    """EXPO's --scale_lr: lr x gradient_accumulation_steps x batch_size x processes (1 here)."""
    objective, trainer, _ = setup(tmp_path, steps=1, scale_lr=True, gradient_accumulation_steps=3, batch_size=2)
    assert trainer.learning_rate == pytest.approx(5e-3 * 3 * 2 * 1)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(5e-3 * 6)


class Ranks:
    """accelerate's ``reduce(tensor, reduction="sum")`` for this rank and one other whose values are given."""

    def __init__(self, device, other: dict, processes: int = 2):
        self.device, self.other, self.num_processes = torch.device(device), other, processes

    def reduce(self, tensor, reduction="sum", scale=1.0):
        assert tensor.device == self.device  # NCCL reduces tensors on the device
        if tensor.is_meta:
            raise Stop
        other = torch.tensor([self.other[k] for k in sorted(self.other)], dtype=torch.float64)
        assert tensor.dtype == torch.float64
        return {"sum": tensor + other, "mean": (tensor + other) / 2}[reduction]


def test_metrics_are_averaged_over_the_ranks_in_float64(tmp_path):
    from rewardloop.training.trainer import Trainer

    trainer = Trainer.__new__(Trainer)
    logs = {"train/loss": 0.1, "train/acc": 0.7}
    trainer.accelerator = Ranks("cpu", {"train/loss": 0.2, "train/acc": 0.4})
    assert trainer._mean_over_processes(logs) == {"train/acc": (0.7 + 0.4) / 2, "train/loss": (0.1 + 0.2) / 2}
    trainer.accelerator = Ranks("meta", {"train/loss": 0.2, "train/acc": 0.4})
    with pytest.raises(Stop):  # the values went to the accelerator's device
        trainer._mean_over_processes(logs)
    trainer.accelerator = Ranks("cpu", {}, processes=1)  # one process: no collective at all
    assert trainer._mean_over_processes(logs) is logs


def test_ddp_syncs_once_per_update_on_its_last_micro_batch(tmp_path, monkeypatch):
    """Gradients of all but the last micro-batch stay local (accelerate's no_sync on the prepared module)."""
    objective, trainer, data = setup(tmp_path, Recording, steps=2, gradient_accumulation_steps=3)
    local = []
    contexts = []

    @contextlib.contextmanager
    def no_sync(module):
        contexts.append(module)
        local.append(True)
        try:
            yield
        finally:
            local.pop()

    monkeypatch.setattr(trainer.accelerator, "no_sync", no_sync)
    seen = []
    loss = objective.loss

    def recorded(policy, data, micro, *args):
        seen.append(bool(local))
        return loss(policy, data, micro, *args)

    monkeypatch.setattr(objective, "loss", recorded)
    trainer.run(objective, data, tmp_path / "state", "fp", progress=False)
    assert seen == [True, True, False] * 2
    assert len(contexts) == 4 and all(module is trainer.policy.module for module in contexts)


def test_scale_lr_counts_every_process(tmp_path, monkeypatch):
    import accelerate

    objective, _, _ = setup(tmp_path, steps=1, scale_lr=True, gradient_accumulation_steps=3, batch_size=2)
    from objective_checks import tiny_unet
    from rewardloop.training.trainer import Trainer

    class TwoProcesses:
        num_processes, device = 2, torch.device("cpu")

        def __init__(self, **kwargs):
            pass

    monkeypatch.setattr(accelerate, "Accelerator", TwoProcesses)
    assert Trainer(objective.train, tiny_unet(), 0, 0).learning_rate == pytest.approx(5e-3 * 3 * 2 * 2)

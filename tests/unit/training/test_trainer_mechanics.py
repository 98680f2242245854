"""The Trainer's own promises, in seconds on a tiny random-init UNet (no built model):
one update follows the mean of its micro-batch losses, an interrupted run resumes from its last
in-stage checkpoint to the uninterrupted result, a weight that turns NaN stops the run, and the
switches (full fine-tuning, determinism, mixed precision) do what they say. Then what `make mutation` found
unguarded: an update's gradient is the mean of its micro-batches' (whatever the optimizer makes of its
scale), the hooks receive what they promise, the schedule spans the plan, no checkpoint is written after
the last update, the guard names the first broken weight and the state folder, the progress bar shows
when asked, and what the Trainer asks of accelerate, the reference and the learning rate."""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import math
import re
import time

import pytest
import torch

from objective_checks import config, pair_inputs, prompt_embeds, sd15_model_info, style_latents, tiny_unet
from rewardloop.objectives import get_objective
from rewardloop.objectives.dpo import DPO
from rewardloop.training.trainer import Trainer, TrainingError


def setup(tmp_path, objective_class=None, **train):
    train = {"steps": 6, "batch_size": 4, "learning_rate": 5e-3, "lr_scheduler": "constant", **train}
    cfg = config("config.yaml", loss="dpo", dpo={"beta": 500, "reference": "base"}, **train)
    objective = (objective_class or get_objective("dpo")).from_config(cfg, 0)
    inputs = pair_inputs(style_latents(0, 8, (4, 8, 8), 1), style_latents(1, 8, (4, 8, 8), 2), prompt_embeds(8, 64, 3))
    unet = tiny_unet()
    # Full fine-tuning has no adapter to disable: the reference is a frozen copy (as the train stage loads it).
    reference = copy.deepcopy(unet) if objective.train.adapter == "none" else None
    trainer = Trainer(objective.train, unet, cfg["seed"], 0, reference)
    return objective, trainer, objective.load(inputs, sd15_model_info())


def weights(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.params]


def test_one_update_follows_the_mean_of_its_micro_batch_losses(tmp_path):
    """Accumulated micro-batches (SGD-free check): the first AdamW update of a run with 3 micro-batches moves
    each weight by -lr * sign(g), g the gradient of the mean of the 3 losses, and logs their mean loss."""
    objective, trainer, data = setup(tmp_path, steps=1, gradient_accumulation_steps=3, max_grad_norm=1e9,
                                     weight_decay=0.0)
    before = weights(trainer)
    grads = [torch.zeros_like(p) for p in trainer.params]
    losses = []
    for micro in range(3):
        loss, _ = objective.loss(trainer.policy, data, (0, micro))
        for g, p_grad in zip(grads, torch.autograd.grad(loss, trainer.params, allow_unused=True)):
            if p_grad is not None:
                g += p_grad / 3
        losses.append(loss.item())
    history, _ = trainer.run(objective, data, tmp_path / "state", "fp", progress=False)
    assert history[0]["train/loss"] == pytest.approx(sum(losses) / 3, rel=1e-5)
    lr = objective.train.learning_rate
    moved = 0
    for b, a, g in zip(before, weights(trainer), grads):
        big = g.abs() > 1e-4  # Adam's first step: lr * g / (|g| + eps) = lr * sign(g) where |g| >> eps
        if big.any():
            torch.testing.assert_close(a[big] - b[big], -lr * torch.sign(g[big]), rtol=1e-3, atol=1e-7)
            moved += 1
    assert moved > 0
    assert history[0]["lr"] == lr and history[0]["step"] == 0


class StopAfter(DPO):
    """DPO interrupted (as by a kill) after the update that makes ``stop_at`` steps."""

    stop_at = 5

    def after_update(self, policy, step):
        if step + 1 == self.stop_at:
            raise KeyboardInterrupt


def test_an_interrupted_run_resumes_from_its_checkpoint_to_the_uninterrupted_result(tmp_path):
    objective, trainer, data = setup(tmp_path, checkpointing_steps=2)
    uninterrupted, resumed_from = trainer.run(objective, data, tmp_path / "a", "fp", progress=False)
    assert resumed_from == 0 and len(uninterrupted) == 6
    expected = weights(trainer)

    objective, trainer, data = setup(tmp_path, StopAfter, checkpointing_steps=2)
    with pytest.raises(KeyboardInterrupt):
        trainer.run(objective, data, tmp_path / "b", "fp", progress=False)
    objective, trainer, data = setup(tmp_path, checkpointing_steps=2)
    history, resumed_from = trainer.run(objective, data, tmp_path / "b", "fp", progress=False)
    assert resumed_from == 4  # the last checkpoint before the interruption (steps 2 and 4; 5 was lost)
    assert [h["train/loss"] for h in history] == [h["train/loss"] for h in uninterrupted]
    assert all(torch.equal(a, b) for a, b in zip(weights(trainer), expected))
    # A state written for other inputs (another fingerprint) is not resumed.
    objective, trainer, data = setup(tmp_path, checkpointing_steps=2)
    assert trainer.run(objective, data, tmp_path / "b", "other inputs", progress=False)[1] == 0


class NaNWeights(DPO):
    """A finite loss whose gradient is NaN: the update turns the weights NaN."""

    def loss(self, policy, data, micro, stream=0):
        loss, logs = super().loss(policy, data, micro, stream)
        zero = sum(p.sum() for p in policy.trainable) * 0
        return loss + torch.sqrt(zero - zero), logs  # d sqrt(x)/dx at 0 is inf, times 0: NaN


def test_a_weight_turned_nan_stops_the_run_naming_the_step_and_keeps_the_last_good_state(tmp_path):
    """The guard runs before each in-stage checkpoint (so no NaN state is saved) and after the last update."""
    for steps, checkpointing_steps in ((4, 1), (1, 100)):
        objective, trainer, data = setup(tmp_path, NaNWeights, steps=steps, checkpointing_steps=checkpointing_steps)
        state = tmp_path / f"state{steps}"
        with pytest.raises(TrainingError, match=r"^iteration 0, step 0: \d+ trained tensor\(s\) became NaN or inf "
                                                r"\(first: .*lora.*\); the last good state in .* is kept and no "
                                                r"model is saved$"):
            trainer.run(objective, data, state, "fp", progress=False)
        assert not list(state.glob("*")) if state.exists() else True


class InfiniteLoss(DPO):
    def loss(self, policy, data, micro, stream=0):
        loss, logs = super().loss(policy, data, micro, stream)
        return loss * math.inf if micro[0] == 2 else loss, logs


def test_a_non_finite_loss_stops_the_run_naming_the_step(tmp_path):
    objective, trainer, data = setup(tmp_path, InfiniteLoss)
    with pytest.raises(TrainingError, match=r"^iteration 0, step 2: loss is inf; the last good state in .* is kept$"):
        trainer.run(objective, data, tmp_path / "state", "fp", progress=False)


def test_full_fine_tuning_trains_every_weight(tmp_path):
    objective, trainer, data = setup(tmp_path, adapter="none", steps=1)
    unet = trainer.model
    assert len(trainer.params) == len(list(unet.parameters())) and all(p.requires_grad for p in unet.parameters())
    before = weights(trainer)
    trainer.run(objective, data, tmp_path / "state", "fp", progress=False)
    changed = sum(not torch.equal(a, b) for a, b in zip(before, weights(trainer)))
    assert changed > 0.9 * len(before)


def test_deterministic_switch():
    assert not torch.are_deterministic_algorithms_enabled()
    try:
        cfg = config("config.yaml", deterministic=True)
        Trainer(get_objective("dpo").from_config(cfg, 0).train, tiny_unet(), 0, 0)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_mixed_precision_reaches_accelerate():
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        cfg = config("config.yaml", mixed_precision="bf16")
        trainer = Trainer(get_objective("dpo").from_config(cfg, 0).train, tiny_unet(), 0, 0)
        assert trainer.accelerator.mixed_precision == "bf16"
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


# --- what a mutation run found unguarded: gradients, hooks, schedule, checkpoints, guard, progress ----------

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
            # accelerate scales each loss by 1/3 before backward, this sum scales each gradient after it: float32
            # rounds the two differently, by a few ulps of the tensor's largest terms: elements near zero differed
            # by up to 2.2e-6 of their tensor's max (here, 1 and 2 threads; 1.5e-6 on CI's CPU). A sum instead of
            # the mean, or a lost micro-batch, is off by a third of the gradient or more.
            torch.testing.assert_close(p.grad, grad, rtol=1e-3, atol=1e-5 * float(grad.abs().max()))
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
    assert asked == [{"mixed_precision": precision, "cpu": True, "kwargs_handlers": []},
                     {"mixed_precision": precision, "cpu": False, "kwargs_handlers": []}]  # torch's collective timeout


def test_a_collective_timeout_reaches_the_process_group_settings():
    from rewardloop.training.trainer import collective_timeout

    assert collective_timeout(None) == []  # torch's default
    (handler,) = collective_timeout(7.5)
    assert handler.to_kwargs() == {"timeout": datetime.timedelta(seconds=7.5)}


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

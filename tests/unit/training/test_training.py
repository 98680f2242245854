"""DPO training mechanics on the tiny model: real peft/accelerate steps on cached latents."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from safetensors.torch import load_file

from rewardloop.models import loading as models
from rewardloop.stages import train

from model_helpers import probe
from training_inputs import pair_files, run_cfg  # noqa: F401  (fixtures: tiny model rollouts, pairs)


def make_run(run_cfg, pair_files, train_overrides=None, seed=0) -> train.TrainingRun:  # noqa: F811
    """The train stage's own preparation: models, the DPO objective, the pairs, a fresh LoRA."""
    cfg = copy.deepcopy(run_cfg)
    cfg["train"].update(train_overrides or {})
    cfg["seed"] = seed
    return train.prepare(cfg, 0, pair_files / "pairs.parquet", pair_files / "latents.safetensors", None)


def test_dpo_loss_falls_accuracy_rises_reference_unchanged(run_cfg, pair_files, tmp_path):  # noqa: F811
    job = make_run(run_cfg, pair_files)
    unet = job.trainer.model
    unet.disable_adapters()
    reference_before = probe(unet)
    unet.enable_adapters()
    before = job.objective.evaluate(job.trainer.policy, job.data)
    history, resumed = job.run(tmp_path / "state", progress=False)
    after = job.objective.evaluate(job.trainer.policy, job.data)
    assert len(history) == 24 and resumed == 0
    # On fixed held batches: policy == reference at the start, so the loss is log 2 and no pair is won.
    assert before["train/loss"] == pytest.approx(math.log(2), abs=1e-6) and before["train/implicit_acc"] == 0
    assert after["train/loss"] < before["train/loss"] - 0.05
    assert after["train/implicit_acc"] > 0.5
    unet.disable_adapters()
    reference_after = probe(unet)
    unet.enable_adapters()
    policy = probe(unet)
    assert torch.equal(reference_before, reference_after)
    assert (policy - reference_after).abs().max() > 1e-4


def test_resume_from_in_stage_state_reproduces_uninterrupted_run(run_cfg, pair_files, tmp_path):  # noqa: F811
    from rewardloop.models.lora import save_lora

    short = {"steps": 8, "checkpointing_steps": 3}
    first = make_run(run_cfg, pair_files, short)
    history, _ = first.run(tmp_path / "state", progress=False)
    save_lora(first.trainer.model, "sd15", first.trainer.cfg.lora, tmp_path / "a")
    # The state on disk is step 6's (saved at 3, then 6); a new job resumes there and finishes.
    second = make_run(run_cfg, pair_files, short)
    resumed_history, resumed_from = second.run(tmp_path / "state", progress=False)
    save_lora(second.trainer.model, "sd15", second.trainer.cfg.lora, tmp_path / "b")
    assert resumed_from == 6 and len(resumed_history) == 8
    a = load_file(tmp_path / "a" / models.LORA_WEIGHTS)
    b = load_file(tmp_path / "b" / models.LORA_WEIGHTS)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)
    # A state from another config/input fingerprint is ignored, not resumed.
    third = make_run(run_cfg, pair_files, short)
    _, resumed_other = third.trainer.run(third.objective, third.data, tmp_path / "state", "other-fp", progress=False)
    assert resumed_other == 0


def test_export_publishes_lora_and_merged_pipeline(run_cfg, pair_files, tmp_path):  # noqa: F811
    from diffusers import StableDiffusionPipeline

    from rewardloop.models.lora import save_lora
    from rewardloop.stages import export

    job = make_run(run_cfg, pair_files, {"steps": 3, "learning_rate": 1e-2})
    job.run(tmp_path / "state", progress=False)
    save_lora(job.trainer.model, "sd15", job.trainer.cfg.lora, tmp_path / "train")
    cfg = {"model": run_cfg["model"], "export": {"merged": True}}
    export.run(cfg, 0, tmp_path / "train", tmp_path / "checkpoint", tmp_path / "export.json")
    assert (tmp_path / "checkpoint" / models.LORA_WEIGHTS).read_bytes() == (
        tmp_path / "train" / models.LORA_WEIGHTS
    ).read_bytes()
    merged = StableDiffusionPipeline.from_pretrained(tmp_path / "checkpoint" / "merged")
    base = models.load_pipeline(run_cfg["model"])
    with_lora = models.load_pipeline(run_cfg["model"], lora_dir=str(tmp_path / "checkpoint"))
    torch.testing.assert_close(probe(merged.unet), probe(with_lora.unet))
    assert (probe(merged.unet) - probe(base.unet)).abs().max() > 1e-5
    assert not list(tmp_path.glob("checkpoint/.tmp-*"))


def test_export_refuses_non_finite_lora(run_cfg, tmp_path):  # noqa: F811
    from safetensors.torch import save_file

    from rewardloop.stages import export

    (tmp_path / "train").mkdir()
    save_file({"unet.x.lora_A.weight": torch.tensor([float("nan")])}, tmp_path / "train" / models.LORA_WEIGHTS)
    with pytest.raises(export.ExportError, match="non-finite"):
        export.run({"model": run_cfg["model"], "export": {"merged": False}}, 0, tmp_path / "train", tmp_path / "ck")
    assert not (tmp_path / "ck" / models.LORA_WEIGHTS).exists()


def test_same_seed_gives_the_same_initial_adapter(run_cfg, pair_files):  # noqa: F811
    first, second = make_run(run_cfg, pair_files).trainer, make_run(run_cfg, pair_files).trainer
    for a, b in zip(first.params, second.params):
        assert torch.equal(a, b)
    other = make_run(run_cfg, pair_files, seed=1).trainer
    assert any(not torch.equal(a, b) for a, b in zip(first.params, other.params))


def test_a_diverging_run_stops_naming_iteration_and_step_and_keeps_the_last_good_state(run_cfg, pair_files, tmp_path):  # noqa: F811
    """lr 1e30: the first Adam update makes the weights ~1e30 (finite), the next forward overflows.
    Training must stop there with an error naming the iteration and step, never save a broken state."""
    from rewardloop.training.state import STATE_FILE
    from rewardloop.training.trainer import TrainingError

    job = make_run(run_cfg, pair_files, {"steps": 6, "checkpointing_steps": 1, "learning_rate": 1e30,
                                         "max_grad_norm": 1e38})
    state = tmp_path / "state" / STATE_FILE
    with pytest.raises(TrainingError, match=r"iteration 0, step [1-5]: .*(loss is (nan|inf)|NaN or inf)") as error:
        job.run(tmp_path / "state", progress=False)
    assert "last good state" in str(error.value)
    saved = load_file(state)
    assert all(torch.isfinite(t).all() for t in saved.values())  # the state on disk is never a broken one


@pytest.mark.parametrize("adapter", ["lora", "none"])
def test_reference_previous_is_model_it_minus_1_from_iteration_1(run_cfg, pair_files, tmp_path, adapter):  # noqa: F811
    """train.dpo.reference: previous at iteration 1 compares against model(0), so the policy (model(0)
    before its first update) starts at exactly log 2; reference: base starts elsewhere (model(0) vs base)."""
    files = (pair_files / "pairs.parquet", pair_files / "latents.safetensors")
    cfg = copy.deepcopy(run_cfg)
    cfg["train"].update({"steps": 6, "adapter": adapter, "dpo": {"beta": 2000, "reference": "previous"}})
    train.run(cfg, 0, *files, None, tmp_path / "trained0", tmp_path / "state0", tmp_path / "m0.json", progress=False)
    model0 = tmp_path / "trained0"
    if adapter == "none":  # model(0) is the exported pipeline with the trained UNet
        from rewardloop.models.full_model import export_pipeline

        model0 = tmp_path / "checkpoint0"
        export_pipeline(cfg["model"], None, tmp_path / "trained0", model0)
    start = {}
    for reference in ("previous", "base"):
        cfg["train"]["dpo"]["reference"] = reference
        job = train.prepare(cfg, 1, *files, model0)
        start[reference] = job.objective.evaluate(job.trainer.policy, job.data)["train/loss"]
    assert start["previous"] == pytest.approx(math.log(2), abs=1e-5)  # (the reference has the LoRA fused)
    assert abs(start["base"] - math.log(2)) > 1e-3, start

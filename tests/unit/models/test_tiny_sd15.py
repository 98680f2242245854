import json

import numpy as np
import pytest

from rewardloop.models.tiny import pretraining, sd15 as tiny_sd15

FAST = dict(vae_steps=2, unet_steps=2, batch_size=4, vae_batch_size=4, progress=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("models") / "tiny"
    seen = {}
    real_train_unet = tiny_sd15.train_unet

    def spy(*args, **kwargs):  # mid-build: the final folder must not exist yet
        seen["exists_mid_build"] = out.exists()
        seen["siblings_mid_build"] = [p.name for p in out.parent.iterdir()]
        return real_train_unet(*args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(tiny_sd15, "train_unet", spy)
    try:
        stats = tiny_sd15.build_tiny_sd15(out, seed=0, **FAST)
    finally:
        mp.undo()
    return out, stats, seen


def test_build_is_atomic_and_complete(built):
    out, stats, seen = built
    assert seen["exists_mid_build"] is False
    assert any(name.startswith(".tmp-tiny") for name in seen["siblings_mid_build"])
    assert [p.name for p in out.parent.iterdir()] == ["tiny"]  # temp folder renamed, none left
    info = json.loads((out / "build_info.json").read_text())
    assert info["seed"] == 0 and info["unet_steps"] == 2 and info == stats
    assert info["scaling_factor"] == pytest.approx(1 / info["latent_std"])
    weights = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.suffix in {".bin", ".safetensors", ".pt"})
    assert weights == ["text_encoder/model.safetensors", "unet/diffusion_pytorch_model.safetensors",
                       "vae/diffusion_pytorch_model.safetensors"]


def test_failed_build_leaves_nothing(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(tiny_sd15, "train_unet", boom)
    with pytest.raises(RuntimeError):
        tiny_sd15.build_tiny_sd15(tmp_path / "tiny", **FAST)
    assert list(tmp_path.iterdir()) == []


def test_loads_and_generates(built):
    import torch
    from diffusers import DDIMScheduler, StableDiffusionPipeline

    out, _, _ = built
    pipe = StableDiffusionPipeline.from_pretrained(out)
    assert isinstance(pipe.scheduler, DDIMScheduler)
    assert pipe.scheduler.config.beta_schedule == "scaled_linear"
    assert pipe.tokenizer.model_max_length == pipe.text_encoder.config.max_position_embeddings
    pipe.set_progress_bar_config(disable=True)
    image = pipe("a red circle on a blue background", num_inference_steps=2, guidance_scale=5.0,
                 generator=torch.Generator().manual_seed(0)).images[0]
    assert image.size == (32, 32)
    assert np.asarray(image).shape == (32, 32, 3)


def test_build_is_reproducible(built, tmp_path):
    out, _, _ = built
    again = tmp_path / "tiny"
    tiny_sd15.build_tiny_sd15(again, seed=0, **FAST)
    for part in ("unet/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors"):
        assert (again / part).read_bytes() == (out / part).read_bytes()


def test_pretraining_prompts_all_or_train_only():
    from rewardloop.models.tiny import synthetic

    train, held_out = synthetic.split_prompts(0)
    everything = pretraining.pretraining_prompts("all")
    assert sorted(everything) == sorted(train + held_out) and len(set(everything)) == 168
    assert pretraining.pretraining_prompts("train") == train
    assert not set(pretraining.pretraining_prompts("train")) & set(held_out)
    with pytest.raises(ValueError, match="tiny.pretrain_on"):
        pretraining.pretraining_prompts("eval")


def test_build_records_what_pretraining_saw(built):
    _, stats, _ = built
    assert stats["pretrain_on"] == "train"


def test_stop_after_runs_the_first_steps_of_the_whole_schedule():
    """``stop_after``: each phase's first steps of a longer build (what a shipped model's proof rebuilds),
    not a short build: past the warm-up its learning rates are those of the whole schedule, so its weights
    differ from a build of that many steps; within the warm-up they are the same."""
    import torch

    def trained(stop_after, steps):
        weight = torch.nn.Parameter(torch.ones(3))
        recipe = pretraining.Recipe(unet_steps=steps, batch_size=2, stop_after=stop_after)
        losses = pretraining.train_denoiser([weight], lambda images, captions: (weight ** 2).sum(),
                                            ["a red circle on a blue background"], recipe, np.random.default_rng(0),
                                            False, "test")
        return weight.detach().clone(), losses

    first, first_losses = trained(105, 400)  # 5 steps past the 100 warm-up steps
    short, short_losses = trained(None, 105)
    assert len(first_losses) == len(short_losses) == 105
    assert first_losses[:100] == short_losses[:100] and not torch.equal(first, short)
    assert pretraining.Recipe(stop_after=3).phase_steps(200) == range(3)
    assert pretraining.Recipe(stop_after=None).phase_steps(5) == range(5)
    assert pretraining.Recipe(stop_after=9).phase_steps(5) == range(5)

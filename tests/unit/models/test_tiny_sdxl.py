"""The tiny SDXL builder: a real SDXL layout that plain diffusers loads, and our sampler on it."""

from __future__ import annotations

import torch

from rewardloop.models import loading as models
from rewardloop.models.families import get_family
from rewardloop.models.families.sdxl import add_time_ids
from rewardloop.sampling.ddim import SamplerSettings, sample_latents

SDXL = get_family("sdxl")


def test_tiny_sdxl_is_a_plain_diffusers_sdxl_folder(tiny_sdxl_model):
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(tiny_sdxl_model)
    assert type(pipe).__name__ == "StableDiffusionXLPipeline"
    assert pipe.unet.config.addition_embed_type == "text_time"
    assert type(pipe.text_encoder_2).__name__ == "CLIPTextModelWithProjection"
    assert all(p.suffix == ".safetensors" for p in tiny_sdxl_model.rglob("*.safetensors"))
    assert not list(tiny_sdxl_model.rglob("*.bin"))


def test_sdxl_conditioning_and_seeded_sampling(tiny_sdxl_model):
    pipe = models.load_pipeline({"family": "sdxl", "path": str(tiny_sdxl_model)})
    cond = SDXL.encode(pipe, ["a red circle on a blue background", "a green square on a red background"])
    assert cond["prompt_embeds"].shape[-1] == pipe.unet.config.cross_attention_dim
    assert cond["pooled_embeds"].shape == (2, pipe.text_encoder_2.config.projection_dim)
    settings = SamplerSettings(steps=3, guidance_scale=5.0, eta=0.0, resolution=32)
    first = sample_latents(pipe, SDXL, cond, [11, 12], settings, batch_size=2, progress=False)
    # Per-image seeds: the same image alone or in a batch.
    alone = sample_latents(pipe, SDXL, {k: v[1:] for k, v in cond.items()}, [12], settings, batch_size=1, progress=False)
    torch.testing.assert_close(first[1:], alone, rtol=1e-4, atol=1e-5)
    assert add_time_ids(32, 2).tolist() == [[32, 32, 0, 0, 32, 32]] * 2


def test_our_sdxl_sampler_matches_the_diffusers_pipeline(tiny_sdxl_model):
    """Same DDIM + CFG trajectory as StableDiffusionXLPipeline given the same initial noise: our
    conditioning (both encoders, pooled embeds, time ids, empty-prompt negative) is diffusers'."""
    from rewardloop.sampling.ddim import initial_noise

    pipe = models.load_pipeline({"family": "sdxl", "path": str(tiny_sdxl_model)})
    prompts = ["a red circle on a blue background", "a green square on a red background"]
    settings = SamplerSettings(steps=4, guidance_scale=5.0, eta=0.0, resolution=32)
    ours = sample_latents(pipe, SDXL, SDXL.encode(pipe, prompts), [3, 4], settings, batch_size=2, progress=False)
    noise = initial_noise([3, 4], SDXL.latent_shape(pipe, 32), "cpu", torch.float32) * pipe.scheduler.init_noise_sigma
    theirs = pipe(prompt=prompts, negative_prompt=["", ""], num_inference_steps=4, guidance_scale=5.0, height=32,
                  width=32, latents=noise.clone(), output_type="latent").images
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def _sdxl_trainer(tiny_sdxl_model, **train):
    from rewardloop.models.families import get_family
    from rewardloop.objectives import get_objective
    from rewardloop.objectives.registry import ModelInfo
    from rewardloop.training.trainer import Trainer
    from training_inputs import full_cfg

    pipe = models.load_pipeline({"family": "sdxl", "path": str(tiny_sdxl_model)})
    cfg = full_cfg(**train)
    objective = get_objective(cfg["train"]["loss"]).from_config(cfg, 0)
    objective.use_model(ModelInfo(get_family("sdxl"), pipe.scheduler.config, pipe.vae_scale_factor))
    return pipe, Trainer(objective.train, pipe.unet, seed=0, iteration=0), objective


def _sdxl_pairs(pipe):
    from rewardloop.objectives.preference import PairData

    cond = SDXL.encode(pipe, ["a red circle on a blue background", "a blue square on a red background"])
    empty = {k: v[0] for k, v in SDXL.encode(pipe, [""]).items()}
    gen = torch.Generator().manual_seed(0)
    return PairData(torch.randn(2, 4, 8, 8, generator=gen), torch.randn(2, 4, 8, 8, generator=gen),
                    cond["prompt_embeds"], pooled=cond["pooled_embeds"], empty=empty)


def test_sdxl_dpo_and_sft_steps_and_lora_round_trip(tiny_sdxl_model, tmp_path):
    from rewardloop.models.lora import load_lora_into, save_lora

    pipe, trainer, dpo = _sdxl_trainer(tiny_sdxl_model, batch_size=2, steps=2, learning_rate=1e-2, dpo={"beta": 2000},
                                       proportion_empty_prompts=1.0, checkpointing_steps=100)
    data = _sdxl_pairs(pipe)
    batch = dpo.micro_batch(data, 0, 0)
    assert batch.empty_mask.all()
    cond = data.conditioning(batch.index, batch.empty_mask)
    assert torch.equal(cond["pooled_embeds"], data.empty["pooled_embeds"].expand(2, -1))  # pooled swapped too
    history, _ = trainer.run(dpo, data, tmp_path / "state", "fp", progress=False)
    assert len(history) == 2 and "train/implicit_acc" in history[0]
    save_lora(trainer.model, "sdxl", trainer.cfg.lora, tmp_path / "lora")
    _, again, sft = _sdxl_trainer(tiny_sdxl_model, loss="sft", batch_size=2)
    load_lora_into(again.model, "sdxl", str(tmp_path / "lora"))
    for a, b in zip(trainer.params, again.params):
        torch.testing.assert_close(a, b)
    loss, logs = sft.loss(again.policy, data, (0, 0))  # SFT on SDXL
    assert torch.isfinite(loss) and set(logs) == {"train/loss"}

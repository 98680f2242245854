"""Full fine-tuning (train.adapter none) and offline Pick-a-Pic pairs, on the tiny model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from rewardloop import config as cfgmod
from rewardloop.models import loading as models
from rewardloop.signal import offline_pairs
from rewardloop.objectives import TrainingInputs, get_objective
from rewardloop.objectives.preference import PairData, concat_pairs, load_pairs
from rewardloop.objectives.registry import ModelInfo
from rewardloop.models.families import get_family
from rewardloop.artifacts import read_table, read_tensors
from rewardloop.stages import train
from rewardloop.training.trainer import Trainer

from model_helpers import probe
from training_inputs import png, write_pickapic
from workflow_helpers import ROOT


def validated(**sections) -> dict:
    prompts = {k: str(ROOT / f"resources/prompts/{k}.txt") for k in ("train", "eval")}
    return cfgmod.validate({"prompts": prompts, **sections})


def synthetic_pairs(n=6, seed=0) -> PairData:
    gen = torch.Generator().manual_seed(seed)
    return PairData(torch.randn(n, 4, 8, 8, generator=gen), torch.randn(n, 4, 8, 8, generator=gen),
                    torch.randn(n, 16, 64, generator=gen))


def test_full_finetune_trains_every_weight_and_keeps_the_reference_frozen(tiny_model, tmp_path):
    from diffusers import UNet2DConditionModel

    from rewardloop.models.full_model import save_unet

    cfg = validated(model={"path": str(tiny_model), "build_tiny": False},
                    train={"adapter": "none", "reference_offload": True, "steps": 3, "batch_size": 2,
                           "learning_rate": 1e-3, "dpo": {"beta": 2000, "reference": "previous"},
                           "checkpointing_steps": 100})
    dpo = get_objective("dpo").from_config(cfg, 0)
    # As the train stage loads them: the policy is model(it-1), the reference a frozen copy of it.
    pipe, reference = train.load_models(cfg["model"], "none", dpo.reference(), None, "cpu")
    dpo.use_model(ModelInfo(get_family("sd15"), pipe.scheduler.config, pipe.vae_scale_factor))
    start = probe(pipe.unet)
    trainer = Trainer(dpo.train, pipe.unet, 0, 0, reference_model=reference)
    assert len(trainer.params) == len(list(pipe.unet.parameters()))  # no adapter: every weight
    assert all(not p.requires_grad for p in reference.parameters())
    trainer.run(dpo, synthetic_pairs(), tmp_path / "state", "fp", progress=False)
    assert torch.equal(probe(reference), start)  # the reference is the starting UNet
    assert next(reference.parameters()).device.type == "cpu"  # offloaded between forwards
    assert (probe(trainer.model) - start).abs().max() > 1e-5
    weights = save_unet(trainer.model, tmp_path / "train")
    assert weights.is_file() and weights.name.endswith(".safetensors")
    torch.testing.assert_close(probe(UNet2DConditionModel.from_pretrained(tmp_path / "train" / "unet")),
                               probe(trainer.model))


def test_full_export_is_a_plain_diffusers_folder(tiny_model, tmp_path):
    from diffusers import DiffusionPipeline, UNet2DConditionModel

    from rewardloop.models.full_model import save_unet
    from rewardloop.stages import export

    unet = UNet2DConditionModel.from_pretrained(tiny_model / "unet")
    with torch.no_grad():
        unet.conv_out.bias.add_(0.5)
    save_unet(unet, tmp_path / "train")
    cfg = {"model": {"family": "sd15", "path": str(tiny_model)}, "export": {"merged": False},
           "train": {"adapter": "none"}}
    export.run(cfg, 0, tmp_path / "train", tmp_path / "checkpoint", tmp_path / "export.json")
    loaded = DiffusionPipeline.from_pretrained(tmp_path / "checkpoint")
    assert type(loaded).__name__ == "StableDiffusionPipeline"
    torch.testing.assert_close(probe(loaded.unet), probe(unet))
    assert not list((tmp_path / "checkpoint").rglob("*.bin"))  # safetensors only
    # The workflow loads model(it) from it as it would load a LoRA folder.
    again = models.load_pipeline(cfg["model"], lora_dir=str(tmp_path / "checkpoint"))
    torch.testing.assert_close(probe(again.unet), probe(unet))


def test_read_offline_pairs_orients_labels_and_drops_ties(tmp_path):
    frame = write_pickapic(tmp_path / "pap.parquet")
    pairs = offline_pairs.read_offline_pairs(tmp_path / "pap.parquet", None, seed=0)
    assert len(pairs) == 5  # the tie is gone
    kept = frame[frame.label_0 != 0.5].reset_index(drop=True)
    for (_, row), (_, src) in zip(pairs.iterrows(), kept.iterrows()):
        assert row.chosen == (src.jpg_0 if src.label_0 == 1 else src.jpg_1)
        assert row.rejected == (src.jpg_1 if src.label_0 == 1 else src.jpg_0)
    subset = offline_pairs.read_offline_pairs(tmp_path / "pap.parquet", 3, seed=0)
    assert len(subset) == 3 and subset.equals(offline_pairs.read_offline_pairs(tmp_path / "pap.parquet", 3, seed=0))


def test_offline_pairs_bad_input_names_the_key(tmp_path):
    pd.DataFrame({"caption": ["x"], "jpg_0": [b"a"], "jpg_1": [b"b"], "label_0": [0.3]}).to_parquet(tmp_path / "b.parquet")
    with pytest.raises(offline_pairs.OfflinePairsError, match="data.offline_pairs .*label_0"):
        offline_pairs.read_offline_pairs(tmp_path / "b.parquet", None, 0)
    with pytest.raises(cfgmod.ConfigError, match="data.offline_pairs: .* is not a file"):
        validated(data={"offline_pairs": str(tmp_path / "missing.parquet")})


def test_crop_centre_or_seeded_random_same_for_both_images():
    image = np.zeros((40, 80, 3), dtype=np.uint8)
    image[:, :, 0] = np.arange(80)[None, :]  # red = column index
    data = png(image)
    centre = offline_pairs.prepare_image(data, 20, offline_pairs.crop_position(0, 3, False))
    assert centre.shape == (3, 20, 20)
    # resized by 0.5 to 40x20: the centre crop starts at column 10 (source column ~20)
    assert (centre[0, 0, 0] + 1) * 127.5 == pytest.approx(20, abs=2)
    positions = {offline_pairs.crop_position(0, i, True) for i in range(5)}
    assert len(positions) == 5 and offline_pairs.crop_position(0, 2, True) == offline_pairs.crop_position(0, 2, True)


def test_offline_pairs_encode_once_and_mix_into_batches(tiny_model, tmp_path):
    write_pickapic(tmp_path / "pap.parquet")
    cfg = validated(model={"path": str(tiny_model), "build_tiny": False},
                    data={"offline_pairs": str(tmp_path / "pap.parquet")}, train={"batch_size": 8})
    count = offline_pairs.encode(cfgmod.stage_config(cfg, "seed", "model", "data", "device"), 32, True, 0,
                                 tmp_path / "off.parquet", tmp_path / "off.safetensors")
    assert count == 5
    offline = load_pairs(TrainingInputs(read_table(tmp_path / "off.parquet").to_pandas(),
                                        read_tensors(tmp_path / "off.safetensors"), "off.parquet", "off.safetensors"))
    assert offline.chosen.shape == (5, 4, 8, 8) and offline.embeds.shape[0] == 5
    online = synthetic_pairs(n=6)
    mixed = concat_pairs(online, offline, offline_fraction=0.25)
    assert len(mixed) == 11 and mixed.offline == 5
    pipe = models.load_pipeline(cfg["model"])
    dpo = get_objective("dpo").from_config(cfg, 0)
    dpo.use_model(ModelInfo(get_family("sd15"), pipe.scheduler.config, pipe.vae_scale_factor))
    trainer = Trainer(dpo.train, pipe.unet, 0, 0)
    index = dpo.micro_batch(mixed, 0, 0).index
    assert len(index) == 8 and (index >= 6).sum() == 2  # 25 % of 8 from the offline pairs
    loss, _ = dpo.loss(trainer.policy, mixed, (0, 0))
    assert torch.isfinite(loss)
    with pytest.raises(Exception, match="data.offline_pairs: latents"):
        concat_pairs(online, PairData(torch.zeros(1, 4, 4, 4), torch.zeros(1, 4, 4, 4), torch.zeros(1, 16, 64)), 0.5)

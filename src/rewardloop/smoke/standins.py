"""Tiny, random-init stand-ins of the reward models the recipes read, in their published formats.

Each is loaded by the reward's own code path, as the real file would be:
- ``pickscore`` / ``clip_score``: a transformers ``CLIPModel`` folder (``save_pretrained``) and a
  ``CLIPProcessor`` folder (CLIP's real tokenizer: vocab.json/merges.txt built from open_clip's
  BPE list), as yuvalkirstain/PickScore_v1 + laion/CLIP-ViT-H-14-laion2B-s32B-b79K and
  openai/clip-vit-large-patch14 ship them;
- ``aesthetic``: that CLIP folder plus the LAION improved-aesthetic-predictor MLP as a ``.pth``
  state dict (``sac+logos+ava1-l14-linearMSE.pth``'s keys, sized to the stand-in's embedding);
- ``hpsv2``: an open_clip ViT state dict saved as ``{"state_dict": ...}`` (``HPS_v2.1_compressed.pt``'s
  layout), with an open_clip model-config JSON for the tiny architecture (``rewards.hpsv2.arch``:
  the real one is ViT-H-14, 1 B parameters).
``build_standin(name, folder)`` returns the reward's options that point at the files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

EMBED_DIM = 16  # the stand-ins' joint image-text embedding size
IMAGE_SIZE = 32


def clip_folders(folder: Path, seed: int = 0) -> tuple[Path, Path]:
    """``(model_dir, processor_dir)`` of a tiny CLIPModel and its CLIPProcessor (built once per folder)."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    from rewardloop.models.published import SD15_SPECIAL_TOKENS_MAP, SD15_TOKENIZER_CONFIG
    from rewardloop.models.tokenizer import write_clip_tokenizer

    model_dir, processor_dir = folder / "clip_model", folder / "clip_processor"
    if (model_dir / "config.json").is_file() and (processor_dir / "preprocessor_config.json").is_file():
        return model_dir, processor_dir
    tokenizer = write_clip_tokenizer(folder / "tokenizer", SD15_TOKENIZER_CONFIG, SD15_SPECIAL_TOKENS_MAP)
    special = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   pad_token_id=tokenizer.pad_token_id)
    config = CLIPConfig(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=tokenizer.model_max_length, **special),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=IMAGE_SIZE, patch_size=8),
        projection_dim=EMBED_DIM,
    )
    torch.manual_seed(seed)
    CLIPModel(config).eval().save_pretrained(model_dir)
    image_processor = CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE},
                                         crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(processor_dir)
    return model_dir, processor_dir


def clip_reward(folder: Path, seed: int = 0) -> dict:
    model_dir, processor_dir = clip_folders(folder, seed)
    return {"model_path": str(model_dir), "processor_path": str(processor_dir)}


def aesthetic(folder: Path, seed: int = 0) -> dict:
    import torch

    from rewardloop.rewards.aesthetic import build_mlp

    model_dir, processor_dir = clip_folders(folder, seed)
    mlp = folder / "sac+logos+ava1-tiny-linearMSE.pth"
    torch.manual_seed(seed + 1)
    torch.save(build_mlp(EMBED_DIM).state_dict(), mlp)
    return {"clip_path": str(model_dir), "processor_path": str(processor_dir), "mlp_path": str(mlp)}


HPS_ARCH = "rewardloop-tiny-hps-vit"
HPS_CONFIG = {
    "embed_dim": EMBED_DIM * 2,
    "vision_cfg": {"image_size": IMAGE_SIZE, "layers": 2, "width": 64, "head_width": 32, "patch_size": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}


def hpsv2(folder: Path, seed: int = 0) -> dict:
    """An open_clip ViT (tiny arch registered from its JSON) saved as HPS v2.1's ``{"state_dict": ...}``."""
    import open_clip
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    arch = folder / f"{HPS_ARCH}.json"
    arch.write_text(json.dumps(HPS_CONFIG, indent=2))
    open_clip.add_model_config(arch)
    torch.manual_seed(seed + 2)
    model, _, _ = open_clip.create_model_and_transforms(HPS_ARCH, pretrained=None)
    checkpoint = folder / "HPS_tiny_compressed.pt"
    torch.save({"state_dict": model.state_dict()}, checkpoint)
    return {"checkpoint_path": str(checkpoint), "arch": str(arch)}


# reward name -> builder(folder, seed) -> the reward's options pointing at the stand-in's files
STANDINS: dict[str, Callable[[Path, int], dict]] = {
    "pickscore": clip_reward,
    "clip_score": clip_reward,
    "aesthetic": aesthetic,
    "hpsv2": hpsv2,
}


def build_standin(name: str, folder, seed: int = 0) -> dict:
    """Write reward ``name``'s stand-in under ``folder``; its options. Rewards that read no file need none."""
    from rewardloop.rewards.base import path_options

    if name not in STANDINS:
        if path_options(name):
            raise ValueError(f"reward {name!r} reads local files but has no stand-in (add one to STANDINS)")
        return {}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return STANDINS[name](folder, seed)

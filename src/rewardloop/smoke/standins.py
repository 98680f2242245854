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
  the real one is ViT-H-14, 1 B parameters);
- ``image_reward``: a folder as THUDM/ImageReward ships it, ``ImageReward.pt`` (the published
  ``blip.visual_encoder.*`` / ``blip.text_encoder.*`` / ``blip.{vision,text}_proj.*`` / ``mlp.layers.*``
  keys, scaled down: a 64-wide 2-block ViT at 224 px, a 32-wide 2-layer med BERT) + ``med_config.json``,
  beside a BERT WordPiece tokenizer (a small uncased vocab.txt) with BLIP's ``[DEC]`` / ``[ENC]``.
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
    from rewardloop.models.tiny.clip_tokenizer import write_clip_tokenizer

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


BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BERT_WORDS = ("a an the of on in with and at to is red green blue yellow black white circle square "
              "triangle background photo cat dog").split()


def bert_tokenizer(folder: Path):
    """An uncased BERT WordPiece tokenizer (vocab.txt of specials, words, characters and ## pieces)
    plus BLIP's ``[DEC]`` bos and ``[ENC]`` tokens (blip.init_tokenizer), saved with save_pretrained."""
    import string

    from transformers import BertTokenizer

    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = BERT_SPECIALS + BERT_WORDS + chars + [f"##{c}" for c in string.ascii_lowercase + string.digits]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 512}, indent=2))
    tokenizer = BertTokenizer.from_pretrained(str(folder))
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    tokenizer.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
    tokenizer.save_pretrained(str(folder))
    return tokenizer


IMAGE_REWARD_VIT = {"width": 64, "depth": 2, "patch": 32, "image_size": 224}  # published: 1024, 24, 16, 224
IMAGE_REWARD_MED = {"architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
                    "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02,
                    "intermediate_size": 64, "layer_norm_eps": 1e-12, "max_position_embeddings": 64,
                    "model_type": "bert", "num_attention_heads": 2, "num_hidden_layers": 2, "pad_token_id": 0,
                    "type_vocab_size": 2, "encoder_width": 64, "add_cross_attention": True}


def image_reward_state_dict(vocab_size: int, seed: int = 0) -> dict:
    """Random tensors under ImageReward.pt's published key names, shaped as its modules would make them
    at the stand-in's sizes (vit.py's VisionTransformer, med.py's BertModel, BLIP_Pretrain's
    projections, ImageReward.py's MLP)."""
    import torch

    from rewardloop.rewards.image_reward import MLP_DROPOUTS, MLP_WIDTHS

    generator = torch.Generator().manual_seed(seed)
    sd: dict = {}

    def add(name, *shape, norm=False):
        if norm:  # LayerNorm: weight near 1, bias near 0
            sd[name + ".weight"] = 1 + 0.1 * torch.randn(shape, generator=generator)
            sd[name + ".bias"] = 0.1 * torch.randn(shape, generator=generator)
            return
        sd[name + ".weight"] = 0.2 * torch.randn(shape, generator=generator)
        sd[name + ".bias"] = 0.1 * torch.randn(shape[0], generator=generator)

    vit, med = IMAGE_REWARD_VIT, IMAGE_REWARD_MED
    width, grid = vit["width"], vit["image_size"] // vit["patch"]
    v = "blip.visual_encoder."
    sd[v + "cls_token"] = 0.2 * torch.randn(1, 1, width, generator=generator)
    sd[v + "pos_embed"] = 0.2 * torch.randn(1, grid * grid + 1, width, generator=generator)
    add(v + "patch_embed.proj", width, 3, vit["patch"], vit["patch"])
    for i in range(vit["depth"]):
        b = f"{v}blocks.{i}."
        add(b + "norm1", width, norm=True)
        add(b + "attn.qkv", 3 * width, width)
        add(b + "attn.proj", width, width)
        add(b + "norm2", width, norm=True)
        add(b + "mlp.fc1", 4 * width, width)
        add(b + "mlp.fc2", width, 4 * width)
    add(v + "norm", width, norm=True)
    hidden, t = med["hidden_size"], "blip.text_encoder."
    sd[t + "embeddings.word_embeddings.weight"] = 0.2 * torch.randn(vocab_size, hidden, generator=generator)
    sd[t + "embeddings.position_embeddings.weight"] = 0.2 * torch.randn(
        med["max_position_embeddings"], hidden, generator=generator)
    add(t + "embeddings.LayerNorm", hidden, norm=True)
    sd[t + "embeddings.position_ids"] = torch.arange(med["max_position_embeddings"]).expand((1, -1))
    for i in range(med["num_hidden_layers"]):
        layer = f"{t}encoder.layer.{i}."
        for block, source in (("attention", hidden), ("crossattention", width)):
            add(layer + block + ".self.query", hidden, hidden)
            add(layer + block + ".self.key", hidden, source)
            add(layer + block + ".self.value", hidden, source)
            add(layer + block + ".output.dense", hidden, hidden)
            add(layer + block + ".output.LayerNorm", hidden, norm=True)
        add(layer + "intermediate.dense", med["intermediate_size"], hidden)
        add(layer + "output.dense", hidden, med["intermediate_size"])
        add(layer + "output.LayerNorm", hidden, norm=True)
    add("blip.vision_proj", 256, width)  # BLIP_Pretrain: embed_dim=256
    add("blip.text_proj", 256, hidden)
    index, size = 0, hidden
    for out in MLP_WIDTHS:
        index += index in MLP_DROPOUTS
        add(f"mlp.layers.{index}", out, size)
        index, size = index + 1, out
    return sd


def image_reward(folder: Path, seed: int = 0) -> dict:
    """ImageReward.pt + med_config.json + a BERT tokenizer folder, as ``rewards.image_reward`` reads them."""
    import torch

    tokenizer = bert_tokenizer(folder / "tokenizer")
    med = dict(IMAGE_REWARD_MED, vocab_size=len(tokenizer))
    (folder / "med_config.json").write_text(json.dumps(med, indent=2))
    torch.save(image_reward_state_dict(len(tokenizer), seed + 3), folder / "ImageReward.pt")
    return {"checkpoint_path": str(folder), "tokenizer_path": str(folder / "tokenizer")}


# reward name -> builder(folder, seed) -> the reward's options pointing at the stand-in's files
STANDINS: dict[str, Callable[[Path, int], dict]] = {
    "pickscore": clip_reward,
    "clip_score": clip_reward,
    "aesthetic": aesthetic,
    "hpsv2": hpsv2,
    "image_reward": image_reward,
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

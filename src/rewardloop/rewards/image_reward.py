"""``image_reward``: ImageReward (Xu et al., NeurIPS 2023), a BLIP model fine-tuned on human
preference rankings of text-to-image generations.

Rebuilt from the published architecture (THUDM/ImageReward, ``ImageReward/ImageReward.py`` and
``ImageReward/models/BLIP/{blip,blip_pretrain,med,vit}.py``) with transformers' BLIP blocks, which
are ports of the same BLIP code: the ViT (``vit.py``) is ``BlipVisionModel``, the "med" BERT with
cross-attention to the image (``med.py``, ``mode='multimodal'``) is ``BlipTextModel``. The published
state dict (``ImageReward.pt``) is mapped onto them key by key (``map_key``); the score is
``ImageReward.score``'s:

- image: ``Resize(224, bicubic)``, ``CenterCrop(224)``, ``ToTensor``, CLIP's mean/std ``Normalize``;
- prompt: BLIP's BERT tokenizer (bert-base-uncased plus the ``[DEC]`` / ``[ENC]`` tokens of
  ``blip.init_tokenizer``), ``padding='max_length', truncation=True, max_length=35``; the ids are
  used as tokenised, starting with ``[CLS]`` (``score`` does not swap in ``[ENC]``);
- the text encoder's last hidden state at position 0 (bidirectional self-attention over the prompt,
  cross-attention to every image token), the 5-Linear MLP (no activations: the published ReLUs are
  commented out; dropouts are no-ops in eval), then ``(reward - MEAN) / STD`` with the published
  constants.

The ``image-reward`` package is not used: it pins ``clip`` from a GitHub archive and ``fairscale``,
and downloads bert-base-uncased and ``med_config.json`` from the hub when it loads.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from rewardloop.rewards.base import register
from rewardloop.rewards.clip_common import check_device, require_path, safe_torch_load, to_rgb

# ImageReward.py, class ImageReward: self.mean / self.std
MEAN = 0.16717362830052426
STD = 1.0333394966054072
MAX_LENGTH = 35  # ImageReward.score: tokenizer(..., max_length=35)
# ImageReward.py, _transform: CLIP's normalisation
PIXEL_MEAN = (0.48145466, 0.4578275, 0.40821073)
PIXEL_STD = (0.26862954, 0.26130258, 0.27577711)
# ImageReward.py, class MLP: Linear(in,1024), Dropout, Linear(1024,128), Dropout, Linear(128,64), Dropout,
# Linear(64,16), Linear(16,1); the Sequential indices of its Linears are 0, 2, 4, 6, 7
MLP_WIDTHS = (1024, 128, 64, 16, 1)
MLP_DROPOUTS = {1: 0.2, 3: 0.2, 5: 0.1}
VIT_HEAD_WIDTH = 64  # blip.create_vit: base 768/12 heads, large 1024/16 heads
CHECKPOINT, MED_CONFIG = "ImageReward.pt", "med_config.json"
# in the published checkpoint (BLIP_Pretrain's contrastive projections and a buffer), unused by score
UNUSED_KEYS = {"blip.vision_proj.weight", "blip.vision_proj.bias", "blip.text_proj.weight",
               "blip.text_proj.bias", "blip.text_encoder.embeddings.position_ids"}

# timm-style ViT names (vit.py) -> transformers BlipVisionModel names, within one block
_VIT_BLOCK = {"norm1": "layer_norm1", "attn.qkv": "self_attn.qkv", "attn.proj": "self_attn.projection",
              "norm2": "layer_norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
_VIT_TOP = {"cls_token": "embeddings.class_embedding", "pos_embed": "embeddings.position_embedding",
            "patch_embed.proj.weight": "embeddings.patch_embedding.weight",
            "patch_embed.proj.bias": "embeddings.patch_embedding.bias",
            "norm.weight": "post_layernorm.weight", "norm.bias": "post_layernorm.bias"}
_BLOCK = re.compile(r"blocks\.(\d+)\.(.+)\.(weight|bias)$")
_MLP = re.compile(r"layers\.(\d+)\.(weight|bias)$")


def map_key(key: str) -> str | None:
    """The rebuilt model's name for a published ``ImageReward.pt`` key; None for a key the score
    does not use (``UNUSED_KEYS``); ``KeyError`` for a key outside the published layout."""
    if key in UNUSED_KEYS:
        return None
    if key.startswith("blip.visual_encoder."):
        rest = key[len("blip.visual_encoder."):]
        if rest in _VIT_TOP:
            return "vision." + _VIT_TOP[rest]
        match = _BLOCK.fullmatch(rest)
        if match and match.group(2) in _VIT_BLOCK:
            return f"vision.encoder.layers.{match.group(1)}.{_VIT_BLOCK[match.group(2)]}.{match.group(3)}"
    elif key.startswith("blip.text_encoder."):
        # med.py's BertModel and transformers' BlipTextModel (a port of it) share their module names
        return "text." + key[len("blip.text_encoder."):]
    elif key.startswith("mlp."):
        match = _MLP.fullmatch(key[len("mlp."):])
        if match and int(match.group(1)) in _mlp_linear_indices():
            return f"mlp.{match.group(1)}.{match.group(2)}"
    raise KeyError(key)


def _mlp_linear_indices() -> list[int]:
    return [i for i in range(len(MLP_WIDTHS) + len(MLP_DROPOUTS)) if i not in MLP_DROPOUTS]


def build_mlp(input_size: int):
    """ImageReward.py's MLP head as an ``nn.Sequential`` with the same indices."""
    from torch import nn

    layers, width = [], input_size
    for index in range(len(MLP_WIDTHS) + len(MLP_DROPOUTS)):
        if index in MLP_DROPOUTS:
            layers.append(nn.Dropout(MLP_DROPOUTS[index]))
        else:
            out = MLP_WIDTHS[len([i for i in range(index) if i not in MLP_DROPOUTS])]
            layers.append(nn.Linear(width, out))
            width = out
    return nn.Sequential(*layers)


def _vision_config(state: dict):
    """The ViT's sizes, read off the published tensors (blip_pretrain builds it from ``vit='large'``:
    1024 wide, 24 blocks, 16 heads, patch 16, 224 px)."""
    from transformers import BlipVisionConfig

    prefix = "blip.visual_encoder."
    width = state[prefix + "cls_token"].shape[-1]
    patch = state[prefix + "patch_embed.proj.weight"].shape[-1]
    grid = round((state[prefix + "pos_embed"].shape[1] - 1) ** 0.5)
    depth = len({key.split(".")[3] for key in state if key.startswith(prefix + "blocks.")})
    return BlipVisionConfig(
        hidden_size=width, intermediate_size=state[prefix + "blocks.0.mlp.fc1.weight"].shape[0],
        num_hidden_layers=depth, num_attention_heads=max(1, width // VIT_HEAD_WIDTH),
        image_size=grid * patch, patch_size=patch,
        hidden_act="gelu", layer_norm_eps=1e-6,  # vit.py: nn.GELU, partial(nn.LayerNorm, eps=1e-6)
    )


def _text_config(med: dict, vision_width: int):
    """``BlipTextConfig`` from med_config.json; the cross-attention reads the ViT's width
    (blip_pretrain.py overrides ``encoder_width`` with ``vision_width``)."""
    from transformers import BlipTextConfig

    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "hidden_act", "max_position_embeddings", "layer_norm_eps", "pad_token_id")
    options = {key: med[key] for key in keys if key in med}
    # is_decoder builds the cross-attention layers (med.py: add_cross_attention); forward runs them
    # with a bidirectional mask (is_decoder=False), as med.py's mode='multimodal'
    return BlipTextConfig(**options, encoder_hidden_size=vision_width, is_decoder=True,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                          bos_token_id=None, eos_token_id=None, sep_token_id=None)  # unused by an encoder


def _rebuild(state: dict, med: dict):
    from torch import nn
    from transformers import BlipTextModel, BlipVisionModel

    vision_config = _vision_config(state)
    model = nn.Module()
    model.vision = BlipVisionModel(vision_config)
    model.text = BlipTextModel(_text_config(med, vision_config.hidden_size), add_pooling_layer=False)
    model.mlp = build_mlp(model.text.config.hidden_size)
    return model


def load_model(folder: Path, option: str = "checkpoint_path"):
    """``(model, image_size)`` from ``folder``'s ImageReward.pt + med_config.json; errors name the file."""
    key = f"rewards.image_reward.{option}"
    for name in (CHECKPOINT, MED_CONFIG):
        if not (folder / name).is_file():
            raise ValueError(f"'{key}': {folder / name} does not exist (the folder must hold {CHECKPOINT} "
                             f"and {MED_CONFIG} from THUDM/ImageReward)")
    try:
        med = json.loads((folder / MED_CONFIG).read_text())
        assert isinstance(med, dict)
    except Exception as exc:
        raise ValueError(f"'{key}': {folder / MED_CONFIG} is not a JSON object (BLIP's med config)") from exc
    state = safe_torch_load("image_reward", option, folder / CHECKPOINT)
    if not isinstance(state, dict) or not state:
        raise ValueError(f"'{key}': {folder / CHECKPOINT} holds no state dict (expected a dict of tensors)")
    try:
        mapped = {target: value for name, value in state.items() if (target := map_key(name)) is not None}
        model = _rebuild(state, med)
        model.load_state_dict(mapped, strict=True)
    except Exception as exc:
        raise ValueError(
            f"'{key}': {folder / CHECKPOINT} is not an ImageReward checkpoint fitting {folder / MED_CONFIG} "
            f"(expected blip.visual_encoder.*, blip.text_encoder.*, mlp.layers.* keys: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from exc
    return model.eval(), model.vision.config.image_size


def load_tokenizer(path: Path, vocab_size: int):
    """BLIP's tokenizer (blip.init_tokenizer): bert-base-uncased plus ``[DEC]`` as bos and ``[ENC]``
    as an additional special token, added here when the folder lacks them."""
    from transformers import BertTokenizer

    problem = "" if any((path / name).is_file() for name in ("vocab.txt", "tokenizer.json")) else "no such files"
    if not problem:
        try:
            tokenizer = BertTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
    if problem:
        raise ValueError(f"'rewards.image_reward.tokenizer_path': {path} holds no BERT tokenizer "
                         f"(vocab.txt / tokenizer.json of bert-base-uncased): {problem}")
    vocab = tokenizer.get_vocab()
    if "[DEC]" not in vocab:
        tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    if "[ENC]" not in vocab:
        tokenizer.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
    if len(tokenizer) > vocab_size:
        raise ValueError(f"'rewards.image_reward.tokenizer_path': {path} has {len(tokenizer)} tokens, more "
                         f"than the checkpoint's {vocab_size} word embeddings")
    return tokenizer


def build_preprocess(size: int):
    """ImageReward.py's ``_transform(224)``: bicubic resize of the short side, centre crop, CLIP normalise."""
    from torchvision.transforms import CenterCrop, Compose, InterpolationMode, Normalize, Resize, ToTensor

    return Compose([Resize(size, interpolation=InterpolationMode.BICUBIC), CenterCrop(size), ToTensor(),
                    Normalize(PIXEL_MEAN, PIXEL_STD)])


@register("image_reward")
class ImageReward:
    """ImageReward score of each image against its prompt (~ -2..2; 0 is the mean on its training set).

    Options (``rewards.image_reward.<option>``):

    - ``checkpoint_path`` (required): local folder holding ``ImageReward.pt`` and ``med_config.json``
      from ``THUDM/ImageReward``; ``ImageReward.pt`` is loaded with ``torch.load(weights_only=True)``.
    - ``tokenizer_path``: folder of the ``bert-base-uncased`` tokenizer (``vocab.txt`` or
      ``tokenizer.json``); default ``checkpoint_path``.
    - ``device``: ``"cpu"`` (default) or ``"cuda"`` / ``"cuda:N"``.

    Batching is the caller's (``RewardSet.score(batch_size=...)``). Computes in float32.
    """

    name = "image_reward"
    PATH_OPTIONS = {"checkpoint_path": ("dir", True), "tokenizer_path": ("dir", False)}

    def __init__(self, checkpoint_path=None, tokenizer_path=None, device: str = "cpu"):
        device = check_device(self.name, device)
        folder = require_path(self.name, "checkpoint_path", checkpoint_path, kind="dir")
        tokenizer_dir = folder if tokenizer_path is None else require_path(
            self.name, "tokenizer_path", tokenizer_path, kind="dir")
        model, size = load_model(folder)
        self.tokenizer = load_tokenizer(tokenizer_dir, model.text.config.vocab_size)
        self.device = device
        self.model = model.to(device)
        self.preprocess = build_preprocess(size)

    @staticmethod
    def check_prompts(prompts: Sequence[str]) -> None:
        return None

    def tokenize(self, prompts: Sequence[str]):
        return self.tokenizer(list(prompts), padding="max_length", truncation=True, max_length=MAX_LENGTH,
                              return_tensors="pt")

    def score(self, images: Sequence, prompts: Sequence[str]) -> tuple[np.ndarray, list[dict]]:
        import torch

        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
        text = self.tokenize(prompts).to(self.device)  # one (prompt, image) pair per row
        pixels = torch.stack([self.preprocess(rgb) for rgb in to_rgb(images)]).to(self.device)
        with torch.inference_mode():
            image_embeds = self.model.vision(pixel_values=pixels).last_hidden_state
            image_atts = torch.ones(image_embeds.shape[:-1], dtype=torch.long, device=self.device)
            hidden = self.model.text(input_ids=text.input_ids, attention_mask=text.attention_mask,
                                     encoder_hidden_states=image_embeds, encoder_attention_mask=image_atts,
                                     is_decoder=False).last_hidden_state
            rewards = self.model.mlp(hidden[:, 0, :].float()).squeeze(-1)
        scores = ((rewards - MEAN) / STD).cpu().numpy().astype(np.float64)
        return scores, [{} for _ in scores]

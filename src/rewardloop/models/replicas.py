"""Random-weight replicas of the published checkpoints of each family, as diffusers folders.

``build_replica(family, out_dir, size="tiny", seed=0, variant=None)`` writes a folder with the layout
of a published checkpoint of the family (``published.VARIANTS[family][variant]``, by default the first:
``published.PUBLISHED_REPOS``; e.g. sd3: medium, large, large-turbo; flux: dev, schnell): the same
``model_index.json`` (written from
the published dict, not by ``save_pretrained``), every component's config with the published keys
and values, the published scheduler class and config, CLIP's real tokenizer files, a T5 tokenizer
trained here (:mod:`rewardloop.models.tiny.t5_tokenizer`), the published weight files (dtype, fp16
variants, T5's two shards and index) - and random weights.

* ``size="full"``: the published dimensions (for GPU smoke runs and benchmarks: compute and memory
  as the real model, quality none).
* ``size="tiny"``: the same configs with only width and depth keys changed (``WIDTH_DEPTH_KEYS``;
  the number of UNet/VAE blocks stays, so ``vae_scale_factor`` is 8), small enough to build in
  seconds and to take a 64x64-pixel generation step on a CPU in well under a second.

``device``: where the random weights are drawn (default the CPU). A full-size replica is drawn fastest on
the GPU that will run it (``device="cuda"``: not drawn on the CPU and copied; not yet timed on a GPU), in
the stored dtype directly; the weights then go to disk as published.

Nothing is downloaded. The same seed on the same device gives bit-identical files (a GPU draws other
random numbers than the CPU); the folder is written atomically (``rewardloop.artifacts.atomic_dir``).
"""

from __future__ import annotations

import copy
import gc
import json
import os
import time
import zlib
from pathlib import Path
from typing import Any, Mapping

from rewardloop.artifacts import atomic_dir, default_mode
from rewardloop.mappings import deep_merge
from rewardloop.models import published as P

FAMILIES = tuple(P.PUBLISHED_FILES)  # the families with a data file in models/families/published/
SIZES = ("tiny", "full")
VARIANTS = {family: tuple(names) for family, names in P.VARIANTS.items()}  # the first is the default

# What a tiny replica may change in each kind of config: widths and depths only. A nested
# config's keys are dotted ("vision_config.hidden_size").
_QWEN_TEXT_WIDTH_DEPTH = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "max_window_layers"}
_CLIP_WIDTH_DEPTH = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "projection_dim"}
WIDTH_DEPTH_KEYS: dict[str, frozenset[str]] = {
    "unet": frozenset({"block_out_channels", "layers_per_block", "attention_head_dim", "cross_attention_dim",
                       "transformer_layers_per_block", "addition_time_embed_dim",
                       "projection_class_embeddings_input_dim"}),
    "transformer": frozenset({"num_layers", "attention_head_dim", "num_attention_heads", "caption_projection_dim",
                              "joint_attention_dim", "pooled_projection_dim", "dual_attention_layers",
                              "num_single_layers"}),
    "vae": frozenset({"block_out_channels", "layers_per_block"}),
    "video_vae": frozenset({"base_dim", "num_res_blocks"}),
    "clip_text": frozenset(_CLIP_WIDTH_DEPTH),
    "t5": frozenset({"d_model", "d_ff", "d_kv", "num_heads", "num_layers", "num_decoder_layers"}),
    # Qwen2.5-VL as transformers 4.53 saves it: flat text keys, their text_config copy, the vision tower's.
    # layer_types and max_window_layers follow the depth.
    "qwen_vl": frozenset(_QWEN_TEXT_WIDTH_DEPTH | {f"text_config.{key}" for key in _QWEN_TEXT_WIDTH_DEPTH | {"layer_types"}}
                         | {f"vision_config.{key}" for key in ("depth", "hidden_size", "intermediate_size", "num_heads",
                                                                 "out_hidden_size", "fullatt_block_indexes")}),
    "safety_checker": frozenset({"projection_dim"} | {
        f"{sub}.{key}" for sub in ("text_config", "vision_config", "text_config_dict", "vision_config_dict")
        for key in _CLIP_WIDTH_DEPTH - {"projection_dim"}}),
}

# What a tiny replica changes in each config of a family (its data file's `tiny`: widths and depths only,
# WIDTH_DEPTH_KEYS; the reasons for each value are in the data file)
TINY_OVERRIDES: dict[str, dict[str, dict]] = {family: data["tiny"] for family, data in P.FAMILY_DATA.items()}

# The model components: (config file kind for WIDTH_DEPTH_KEYS, class name).
_MODEL_KINDS = {
    "UNet2DConditionModel": "unet", "SD3Transformer2DModel": "transformer", "FluxTransformer2DModel": "transformer",
    "QwenImageTransformer2DModel": "transformer", "AutoencoderKL": "vae", "AutoencoderKLQwenImage": "video_vae",
    "Qwen2_5_VLForConditionalGeneration": "qwen_vl",
    "CLIPTextModel": "clip_text", "CLIPTextModelWithProjection": "clip_text", "T5EncoderModel": "t5",
    "StableDiffusionSafetyChecker": "safety_checker",
}
# T5's published shards were cut at transformers 4.41's default of 5 GB; the sharded diffusers
# transformers (FLUX.1's three shards, SD3.5 Large's two) at diffusers' default of 10 GB.
FULL_SHARD_SIZE = "5GB"
DIFFUSERS_SHARD_SIZE = "10GB"
SINGLE_FILE = "1000GB"  # the other published UNets and transformers are single files (SDXL's is 10.3 GB)
_DIFFUSERS_MODELS = ("UNet2DConditionModel", "SD3Transformer2DModel", "FluxTransformer2DModel", "AutoencoderKL",
                     "QwenImageTransformer2DModel", "AutoencoderKLQwenImage")


class ReplicaError(ValueError):
    pass


def _check(family: str, size: str, variant: str | None = None) -> str:
    """Refuse an unknown family, size or variant (naming the choices); return the variant."""
    if family not in FAMILIES:
        raise ReplicaError(f"family: unknown {family!r} (expected one of {', '.join(FAMILIES)})")
    if size not in SIZES:
        raise ReplicaError(f"size: unknown {size!r} (expected one of {', '.join(SIZES)})")
    if variant is None:
        return VARIANTS[family][0]
    if variant not in VARIANTS[family]:
        raise ReplicaError(f"variant: unknown {variant!r} for family {family} (expected one of "
                           f"{', '.join(VARIANTS[family])})")
    return variant


def published_variant(family: str, variant: str | None = None) -> dict:
    """``published.VARIANTS[family][variant]`` (repo, files, weights[, sampling]); None: the default."""
    return P.VARIANTS[family][_check(family, "tiny", variant)]


def tiny_overrides(family: str, variant: str | None = None) -> dict[str, dict]:
    """The family's tiny overrides, less any key the variant's published file does not have (SD3.5
    Large has no dual_attention_layers): a tiny replica changes values, never the key set."""
    files = published_variant(family, variant)["files"]
    return {path: {k: v for k, v in override.items() if k in files[path]}
            for path, override in TINY_OVERRIDES[family].items()}


def replica_files(family: str, size: str = "tiny", variant: str | None = None) -> dict[str, dict]:
    """Every JSON file of the replica (path in the folder -> dict), before the T5 tokenizer's vocabulary."""
    variant = _check(family, size, variant)
    files = copy.deepcopy(P.VARIANTS[family][variant]["files"])
    if size == "tiny":
        for path, override in tiny_overrides(family, variant).items():
            files[path] = deep_merge(files[path], override)
    return files


def variant_of(family: str, path: str) -> str | None:
    """The variant whose hub repository is ``path`` (a hub id such as black-forest-labs/FLUX.1-schnell),
    else None: which replica stands in for a recipe's ``model.path``."""
    for name, entry in P.VARIANTS.get(family, {}).items():
        if entry["repo"].lower() == str(path).lower():
            return name
    return None


def component_kind(family: str, component: str) -> str:
    """The WIDTH_DEPTH_KEYS entry of a model component (from its published class)."""
    return _MODEL_KINDS[P.PUBLISHED_FILES[family]["model_index.json"][component][1]]


def flatten(config: Mapping, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (for diffing nested configs)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def json_text(data) -> str:
    """A config file's text as the published files are formatted (``json.dumps(indent=2)`` + newline)."""
    return json.dumps(data, indent=2) + "\n"


def _component_seed(seed: int, component: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(component.encode())) % (2**63)


def _instantiate(class_name: str, config: dict):
    """The model of a component config (random init from torch's global generator)."""
    if class_name in _DIFFUSERS_MODELS:
        import diffusers

        return getattr(diffusers, class_name).from_config(config)
    if class_name == "StableDiffusionSafetyChecker":
        from diffusers.pipelines.stable_diffusion.safety_checker import StableDiffusionSafetyChecker
        from transformers import CLIPConfig

        return StableDiffusionSafetyChecker(CLIPConfig.from_dict(config))
    import transformers

    config_class = {"T5EncoderModel": transformers.T5Config,
                    "Qwen2_5_VLForConditionalGeneration": transformers.Qwen2_5_VLConfig}.get(class_name,
                                                                                            transformers.CLIPTextConfig)
    return getattr(transformers, class_name)(config_class.from_dict(config))


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def _cast(model, dtype: str):
    """``model.to(dtype)`` without diffusers' warning about modules kept in float32 (none here)."""
    import torch
    from diffusers.utils import logging as diffusers_logging

    level = diffusers_logging.get_verbosity()
    diffusers_logging.set_verbosity_error()
    try:
        return model.to(getattr(torch, dtype))
    finally:
        diffusers_logging.set_verbosity(level)


def _save_weights(model, folder: Path, dtype: str, variant: str | None, max_shard_size: str | int) -> None:
    from transformers.utils import logging as transformers_logging

    kwargs = {"safe_serialization": True, "max_shard_size": max_shard_size}
    if variant:
        kwargs["variant"] = variant
    bars = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # "Writing model shards" for every text encoder
    try:
        _cast(model, dtype).save_pretrained(folder, **kwargs)
    finally:
        if bars:
            transformers_logging.enable_progress_bar()


def _published_index(folder: Path) -> None:
    """A shard index as transformers 4.41 wrote T5's: {"metadata": {"total_size"}, "weight_map"}."""
    for path in folder.glob("*.safetensors.index.json"):
        index = json.loads(path.read_text())
        index["metadata"] = {"total_size": index["metadata"]["total_size"]}
        path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def _shard_size_for(model, dtype: str, shards: int) -> int:
    """A max_shard_size (bytes) that cuts ``model``'s weights into exactly ``shards`` files (tiny)."""
    from huggingface_hub import split_torch_state_dict_into_shards

    state = _cast(model, dtype).state_dict()
    total = sum(t.numel() * t.element_size() for t in state.values())
    step = max(1, total // 1000)
    for limit in range(step, total + 1, step):  # the smallest limit giving that many shards
        if len(split_torch_state_dict_into_shards(state, max_shard_size=limit).filename_to_tensors) == shards:
            return limit
    raise ReplicaError(f"cannot cut {type(model).__name__} into {shards} shards")


def _write_model(folder: Path, class_name: str, config: dict, storage: P.Storage, size: str, seed: int,
                 device: str = "cpu") -> int:
    """Instantiate (random weights, drawn on ``device``), save as published, write the published config; params."""
    import torch

    stem, dtype, fp16_variant, shards = storage.file, storage.dtype, storage.fp16_variant, storage.shards
    default = torch.get_default_dtype()
    where = torch.device(device)
    accelerators = [] if where.type == "cpu" else [where.index or 0]
    # the caller's random state (the CPU's and the device's) is left as it was
    with torch.random.fork_rng(devices=accelerators, device_type=where.type if accelerators else None):
        torch.manual_seed(seed)
        torch.set_default_dtype(getattr(torch, dtype))  # initialise in the stored dtype (T5-XXL: 9.5 GB, not 19)
        try:
            with where:
                model = _instantiate(class_name, copy.deepcopy(config)).eval()  # from_dict may edit nested dicts
        finally:
            torch.set_default_dtype(default)
    params = parameter_count(model)
    if shards > 1 and size == "full":
        limit = storage.shard_size or (DIFFUSERS_SHARD_SIZE if class_name in _DIFFUSERS_MODELS else FULL_SHARD_SIZE)
    elif shards > 1:
        limit = _shard_size_for(model, dtype, shards)
    else:
        limit = SINGLE_FILE
    _save_weights(model, folder, dtype, None, limit)
    if fp16_variant:
        _save_weights(model, folder, "float16", "fp16", limit)
    del model
    gc.collect()
    for extra in ("generation_config.json",):  # written back below where the published folder has one
        (folder / extra).unlink(missing_ok=True)
    (folder / "config.json").write_text(json_text(config))
    _published_index(folder)
    weights = sorted(p.name for p in folder.glob("*.safetensors"))
    expected = 1 + fp16_variant if shards == 1 else shards
    if len(weights) != expected or (shards == 1 and f"{stem}.safetensors" not in weights):
        raise ReplicaError(f"{folder}: wrote {weights}, expected {stem} weights in {shards} shard(s)")
    return params


def _component_files(files: Mapping[str, dict], component: str) -> dict[str, dict]:
    """The published JSON files of one component's folder: name -> dict."""
    return {path.split("/", 1)[1]: data for path, data in files.items() if path.startswith(f"{component}/")}


def build_replica(family: str, out_dir: str | os.PathLike, size: str = "tiny", seed: int = 0,
                  variant: str | None = None, device: str = "cpu") -> dict:
    """Write the replica of ``family``'s published checkpoint (``variant``, default the family's first)
    at ``out_dir``; return build stats.

    Stats: ``params`` (per model component), ``bytes`` (per component folder and ``total``) and
    ``wall_s``. Random weights from ``seed``, drawn on ``device``: the same seed on the same device gives
    bit-identical files.
    """
    from rewardloop.models.tiny import clip_tokenizer as tok
    from rewardloop.models.tiny.qwen_tokenizer import write_qwen2_tokenizer
    from rewardloop.models.tiny.t5_tokenizer import build_t5_tokenizer

    variant = _check(family, size, variant)
    published = P.VARIANTS[family][variant]
    t0 = time.perf_counter()
    files = replica_files(family, size, variant)
    index = files["model_index.json"]
    params: dict[str, int] = {}
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        (tmp / "model_index.json").write_text(json_text(index))
        for component, entry in index.items():
            if component.startswith("_") or not isinstance(entry, list):
                continue
            folder = tmp / component
            folder.mkdir()
            class_name = entry[1]
            if class_name in ("CLIPTokenizer",):
                tok.write_clip_tokenizer(folder, files[f"{component}/tokenizer_config.json"],
                                         files[f"{component}/special_tokens_map.json"])
            elif class_name == "T5TokenizerFast":
                build_t5_tokenizer(folder, files[f"{component}/tokenizer_config.json"])
            elif class_name == "Qwen2Tokenizer":
                write_qwen2_tokenizer(folder, _component_files(files, component))
            elif component == "scheduler":
                (folder / "scheduler_config.json").write_text(json_text(files["scheduler/scheduler_config.json"]))
            elif component == "feature_extractor":
                (folder / "preprocessor_config.json").write_text(
                    json_text(files["feature_extractor/preprocessor_config.json"]))
            else:
                params[component] = _write_model(folder, class_name, files[f"{component}/config.json"],
                                                 published["weights"][component], size,
                                                 _component_seed(seed, component), device)
                for name, data in _component_files(files, component).items():  # e.g. generation_config.json
                    if name != "config.json":
                        (folder / name).write_text(json_text(data))
        mode = default_mode()
        for path in tmp.rglob("*"):  # save_pretrained leaves its weight files owner-only (0600)
            if path.is_file():
                os.chmod(path, mode)
        sizes = {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                 for p in sorted(tmp.iterdir()) if p.is_dir()}
        sizes["total"] = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
    return {"family": family, "variant": variant, "size": size, "seed": seed, "device": device,
            "repo": published["repo"],
            "params": params,
            "bytes": sizes, "wall_s": round(time.perf_counter() - t0, 3)}

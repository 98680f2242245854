"""The published configs of the model families and their variants (full size), and what is known
of each checkpoint's weight files.

The configs are data: one folder per published checkpoint under ``models/families/published/``
(``<family>_<variant>``, laid out as its hub repository is: ``model_index.json``,
``unet/config.json``, ...), each file the JSON file of the published diffusers checkpoint, key for
key and in the file's own key order and formatting (``rewardloop.models.replicas`` writes them back
verbatim). A folder per checkpoint, mirroring the hub, so that a file can be diffed against a real
download and a new checkpoint is added by dropping its JSON files in; a variant's folder holds only
the files in which it differs from its family's default (its data file's ``folders`` say which folders
each one is layered from). The source of every value, verbatim or reconstructed, is in that folder's
README.md; in short:

* sd15: ``stable-diffusion-v1-5/stable-diffusion-v1-5``, from the GitHub mirror of the hub repository's
  git history ``HDRJ-One/runwayml-stable-diffusion-v1-5`` (HEAD 5fa07f3), verbatim.
* sdxl: ``stabilityai/stable-diffusion-xl-base-1.0``, from ``andrewcchoi/stabilityai-stable-diffusion-xl-base-1.0``
  (HEAD bf71498), verbatim.
* sd3: ``stabilityai/stable-diffusion-3.5-medium`` (gated: no verbatim mirror was found), cross-checked
  against public code that reproduces it (``tenstorrent/tt-forge-models``) and the model card; partly
  reconstructed.
* sd3 variants large and large-turbo: ``stabilityai/stable-diffusion-3.5-large`` (-turbo), gated; from the
  hub mirror ``frankjoshua/stable-diffusion-3.5-large`` (file pages and tree listings with byte sizes).
* flux: ``black-forest-labs/FLUX.1-dev`` (gated; the default variant) and ``black-forest-labs/FLUX.1-schnell``
  (Apache-2.0): the schnell repository's own file pages, hub mirrors of both at their diffusers commits
  (768d12a, 01aa605) and verbatim copies, each file checked against the byte size the hub tree lists.
* qwen_image: ``Qwen/Qwen-Image`` (Apache-2.0; no mirror of the repository was found): the configs as public
  training code pastes them (kohya-ss/musubi-tuner, ostris/ai-toolkit), each checked against the byte size
  a hub listing gives; the tokenizer's settings reconstructed (no copy of its JSON files was found).

What a family's checkpoints are beyond their JSON files is data too: ``families/published/<family>.yaml``
(the family's data file; its comments keep each value's source) lists its variants (the first is the family's
default) with their hub repository, the folders their JSON files are layered from, how each component's weights
are stored (:class:`Storage`), the model card's sampling settings, and what is known of their weights
(parameter counts, byte sizes, git blob ids) that the full-size replicas are checked against; and what a tiny
replica changes in each config. Adding a family adds its folder(s) and its data file here, nothing in code.

``published_files(family, variant)`` is the one loader of the JSON files, :func:`family_data` of the data files.
``VARIANTS[family]`` maps each variant to its repo, files, weights and (where a model card gives them)
sampling; ``PUBLISHED_FILES`` / ``WEIGHTS`` / ``PUBLISHED_REPOS`` hold the defaults'. The ``SD15_UNET``-style
names are the default checkpoints' files, by component. ``PARAMETERS`` (defaults) and ``VARIANT_PARAMETERS``
(each variant of a family that has several) hold exact parameter counts, ``ROUNDED_PARAMETERS`` and
``VARIANT_ROUNDED_PARAMETERS`` rounded published figures, ``LFS_SIZES`` the byte sizes of the defaults' weight
files (from the git-LFS pointers of the mirrors above), ``FILE_SIZES`` / ``INDEX_TOTAL_SIZES`` those of single
files and shard indexes, ``CONFIG_SIZES`` the hub's byte sizes of JSON files no copy of which was at hand, and
``CONFIG_GIT_BLOBS`` the git blob ids of those that were.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import yaml

PUBLISHED_DIR = Path(__file__).parent / "families" / "published"


class Storage(NamedTuple):
    """How a component's weights are published: the file stem, the dtype of the main file, whether an fp16
    variant file sits beside it, the number of shards, and the size the shards are cut at where it is not the
    library's default (None: diffusers' 10 GB for its models, transformers' 5 GB for the text encoders)."""

    file: str
    dtype: str
    fp16_variant: bool
    shards: int
    shard_size: str | None = None


class PublishedDataError(ValueError):
    """A published checkpoint's JSON folder is missing, unreadable or inconsistent."""


def family_data(family: str, root: Path = PUBLISHED_DIR) -> dict:
    """``families/published/<family>.yaml``: the family's variants (the first its default) and tiny overrides."""
    path = root / f"{family}.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise PublishedDataError(f"{path}: cannot read the family's data file ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise PublishedDataError(f"{path}: not valid YAML ({err})") from None
    if (not isinstance(data, dict) or not isinstance(data.get("variants"), dict) or not data["variants"]
            or not isinstance(data.get("tiny"), dict)):
        raise PublishedDataError(f"{path}: expected a mapping with `variants` (at least one) and `tiny` (what a "
                                 f"tiny replica changes in each config)")
    for name, variant in data["variants"].items():
        missing = [key for key in ("repo", "folders", "weights") if key not in (variant or {})]
        if missing:
            raise PublishedDataError(f"{path}: variants.{name} lacks {', '.join(missing)}")
    return data


# Every family with a data file, and its data (alphabetical: the order of the files).
FAMILY_DATA: dict[str, dict] = {path.stem: family_data(path.stem) for path in sorted(PUBLISHED_DIR.glob("*.yaml"))}

# The folders each published checkpoint's files are read from, in order, a later folder's file replacing an
# earlier one's (a variant holds only the files in which it differs from its family's default).
CHECKPOINT_FOLDERS: dict[str, dict[str, tuple[str, ...]]] = {
    family: {name: tuple(variant["folders"]) for name, variant in data["variants"].items()}
    for family, data in FAMILY_DATA.items()}


def published_files(family: str, variant: str | None = None, root: Path = PUBLISHED_DIR) -> dict[str, dict]:
    """Every JSON file of ``family``'s published checkpoint ``variant`` (None: the family's default):
    path in the checkpoint folder -> dict, in sorted path order, each dict in its file's key order.

    A fresh dict on every call (callers may edit it). A variant's folder may only replace files of
    the default's, so every variant of a family has the same set of files. ``root``: the folder
    that holds the checkpoints' folders.
    """
    variants = CHECKPOINT_FOLDERS.get(family)
    if variants is None:
        raise PublishedDataError(f"family: unknown {family!r} (expected one of {', '.join(CHECKPOINT_FOLDERS)})")
    variant = next(iter(variants)) if variant is None else variant
    if variant not in variants:
        raise PublishedDataError(f"variant: unknown {variant!r} for family {family} "
                                 f"(expected one of {', '.join(variants)})")
    files: dict[str, dict] = {}
    for depth, name in enumerate(variants[variant]):
        folder = root / name
        paths = sorted(folder.rglob("*.json"))
        if not paths:
            raise PublishedDataError(f"{folder}: no published JSON files (expected the folder of {family} {variant})")
        for path in paths:
            key = path.relative_to(folder).as_posix()
            if depth and key not in files:
                raise PublishedDataError(f"{path}: {key} is not a file of {variants[variant][0]} (a variant's "
                                         f"folder may only replace its default's files)")
            try:
                files[key] = json.loads(path.read_text())
            except json.JSONDecodeError as err:
                raise PublishedDataError(f"{path}: not valid JSON ({err})") from None
    return files


def _storage(entry: dict) -> Storage:
    return Storage(entry["file"], entry["dtype"], bool(entry["fp16_variant"]), int(entry["shards"]),
                   entry.get("shard_size"))


# Each family's variants: repo, files, weights (component -> Storage) and, where a model card gives them, the
# sampling settings. The first is the family's default.
VARIANTS: dict[str, dict[str, dict]] = {
    family: {name: {"repo": variant["repo"], "files": published_files(family, name),
                    "weights": {component: _storage(entry) for component, entry in variant["weights"].items()},
                    **({"sampling": variant["sampling"]} if "sampling" in variant else {})}
             for name, variant in data["variants"].items()}
    for family, data in FAMILY_DATA.items()}
_DEFAULTS = {family: next(iter(variants.values())) for family, variants in VARIANTS.items()}
PUBLISHED_FILES: dict[str, dict[str, dict]] = {family: default["files"] for family, default in _DEFAULTS.items()}
PUBLISHED_REPOS: dict[str, str] = {family: default["repo"] for family, default in _DEFAULTS.items()}
WEIGHTS: dict[str, dict[str, Storage]] = {family: default["weights"] for family, default in _DEFAULTS.items()}

# The default checkpoints' files by name (the names callers import).
_SD15, _SDXL, _SD3, _FLUX = (PUBLISHED_FILES[family] for family in ("sd15", "sdxl", "sd3", "flux"))
SD15_MODEL_INDEX = _SD15["model_index.json"]
SD15_SCHEDULER = _SD15["scheduler/scheduler_config.json"]
SD15_UNET = _SD15["unet/config.json"]
SD15_VAE = _SD15["vae/config.json"]
SD15_TEXT_ENCODER = _SD15["text_encoder/config.json"]
SD15_TOKENIZER_CONFIG = _SD15["tokenizer/tokenizer_config.json"]
SD15_SPECIAL_TOKENS_MAP = _SD15["tokenizer/special_tokens_map.json"]
SD15_FEATURE_EXTRACTOR = _SD15["feature_extractor/preprocessor_config.json"]
SD15_SAFETY_CHECKER = _SD15["safety_checker/config.json"]

SDXL_MODEL_INDEX = _SDXL["model_index.json"]
SDXL_SCHEDULER = _SDXL["scheduler/scheduler_config.json"]
SDXL_UNET = _SDXL["unet/config.json"]
SDXL_VAE = _SDXL["vae/config.json"]
SDXL_TEXT_ENCODER = _SDXL["text_encoder/config.json"]
SDXL_TEXT_ENCODER_2 = _SDXL["text_encoder_2/config.json"]
SDXL_TOKENIZER_CONFIG = _SDXL["tokenizer/tokenizer_config.json"]
SDXL_SPECIAL_TOKENS_MAP = _SDXL["tokenizer/special_tokens_map.json"]
SDXL_TOKENIZER_2_CONFIG = _SDXL["tokenizer_2/tokenizer_config.json"]
SDXL_SPECIAL_TOKENS_MAP_2 = _SDXL["tokenizer_2/special_tokens_map.json"]

SD3_MODEL_INDEX = _SD3["model_index.json"]
SD3_SCHEDULER = _SD3["scheduler/scheduler_config.json"]
SD3_TRANSFORMER = _SD3["transformer/config.json"]
SD3_VAE = _SD3["vae/config.json"]
SD3_TEXT_ENCODER = _SD3["text_encoder/config.json"]
SD3_TEXT_ENCODER_2 = _SD3["text_encoder_2/config.json"]
SD3_TEXT_ENCODER_3 = _SD3["text_encoder_3/config.json"]
SD3_TOKENIZER_CONFIG = _SD3["tokenizer/tokenizer_config.json"]
SD3_SPECIAL_TOKENS_MAP = _SD3["tokenizer/special_tokens_map.json"]
SD3_TOKENIZER_2_CONFIG = _SD3["tokenizer_2/tokenizer_config.json"]
SD3_SPECIAL_TOKENS_MAP_2 = _SD3["tokenizer_2/special_tokens_map.json"]
SD3_TOKENIZER_3_CONFIG = _SD3["tokenizer_3/tokenizer_config.json"]  # the vocabulary's entries: t5_tokenizer
T5_SEQUENCE_LENGTH = 256  # StableDiffusion3Pipeline's default max_sequence_length

FLUX_MODEL_INDEX = _FLUX["model_index.json"]
FLUX_DEV_SCHEDULER = _FLUX["scheduler/scheduler_config.json"]
FLUX_DEV_TRANSFORMER = _FLUX["transformer/config.json"]
FLUX_DEV_VAE = _FLUX["vae/config.json"]
FLUX_TEXT_ENCODER = _FLUX["text_encoder/config.json"]
FLUX_TEXT_ENCODER_2 = _FLUX["text_encoder_2/config.json"]
FLUX_TOKENIZER_CONFIG = _FLUX["tokenizer/tokenizer_config.json"]
FLUX_SPECIAL_TOKENS_MAP = _FLUX["tokenizer/special_tokens_map.json"]
FLUX_TOKENIZER_2_CONFIG = _FLUX["tokenizer_2/tokenizer_config.json"]

BOS, EOS = "<|startoftext|>", "<|endoftext|>"  # CLIP's special tokens, as its tokenizer files spell them

# ---------------------------------------------------------------------------------------------
# What is known of the published weights (each family's data file, with its sources), by key
# ---------------------------------------------------------------------------------------------


def _known(key: str, default_only: bool = False, several_variants: bool = False) -> dict[tuple, object]:
    """``{(family, variant, item): value}`` of the data files' ``key`` section (of the default variants only,
    or of the variants of the families that have several)."""
    found = {}
    for family, data in FAMILY_DATA.items():
        variants = data["variants"]
        if several_variants and len(variants) < 2:
            continue
        for index, (name, variant) in enumerate(variants.items()):
            if default_only and index:
                break
            for item, value in (variant.get(key) or {}).items():
                found[family, name, item] = tuple(value) if isinstance(value, list) else value
    return found


def _by_family(known: dict[tuple, object]) -> dict[tuple[str, str], object]:
    return {(family, item): value for (family, _, item), value in known.items()}


def _grouped(known: dict[tuple, object]) -> dict:
    """``{(a, item): v}`` -> ``{a: {item: v}}``; ``{(a, b, item): v}`` -> ``{(a, b): {item: v}}``."""
    grouped: dict = {}
    for key, value in known.items():
        grouped.setdefault(key[0] if len(key) == 2 else key[:-1], {})[key[-1]] = value
    return grouped


# Exact parameter counts of the full-size components: of each family's default, and of each variant of the
# families with several (those are checked against their replica one by one)
PARAMETERS = _by_family(_known("parameters", default_only=True))
VARIANT_PARAMETERS = _known("parameters", several_variants=True)
# Rounded published figures: (figure, half the rounding step)
ROUNDED_PARAMETERS = _by_family(_known("rounded_parameters", default_only=True))
VARIANT_ROUNDED_PARAMETERS = _known("rounded_parameters", several_variants=True)
# Byte sizes of the defaults' published weight files: the git-LFS pointers ("size N") in the mirrors. A
# safetensors file is its tensors (parameter count x bytes per element) plus a JSON header of some kilobytes,
# which bounds each component's parameter count from both sides.
LFS_SIZES: dict[str, dict[str, int]] = _grouped(_by_family(_known("lfs_sizes", default_only=True)))
# Byte sizes of published single weight files that hold one component: (family, variant, component) ->
# (file, bytes, bytes per stored value); and the total_size of a shard index (no header: exact)
FILE_SIZES = _known("file_sizes")
INDEX_TOTAL_SIZES = _known("index_total_sizes")
# Byte sizes of the published JSON files where no copy of the file was at hand but the hub tree lists the
# size: (family, variant) -> {path: bytes}; each file of the checkpoint's folder (as replicas write it) has it
CONFIG_SIZES: dict[tuple[str, str], dict[str, int]] = _grouped(_known("config_sizes"))
# The git blob ids of the defaults' published JSON files (git ls-tree of the mirrors): the files of
# families/published/, and a config written from their dicts as json.dumps(d, indent=2) + "\n", reproduce each
# one byte for byte
CONFIG_GIT_BLOBS: dict[str, dict[str, str]] = _grouped(_by_family(_known("config_git_blobs", default_only=True)))

# The variants' own files by name.
_SD35_LARGE, _SD35_LARGE_TURBO = VARIANTS["sd3"]["large"]["files"], VARIANTS["sd3"]["large-turbo"]["files"]
SD35_LARGE_MODEL_INDEX = _SD35_LARGE["model_index.json"]
SD35_LARGE_SCHEDULER = _SD35_LARGE["scheduler/scheduler_config.json"]
SD35_LARGE_TRANSFORMER = _SD35_LARGE["transformer/config.json"]
SD35_LARGE_VAE = _SD35_LARGE["vae/config.json"]
SD35_LARGE_TURBO_SCHEDULER = _SD35_LARGE_TURBO["scheduler/scheduler_config.json"]
_FLUX_SCHNELL = VARIANTS["flux"]["schnell"]["files"]
FLUX_SCHNELL_SCHEDULER = _FLUX_SCHNELL["scheduler/scheduler_config.json"]
FLUX_SCHNELL_TRANSFORMER = _FLUX_SCHNELL["transformer/config.json"]
FLUX_SCHNELL_VAE = _FLUX_SCHNELL["vae/config.json"]

# The git blob ids of the published CLIP vocabulary files, identical in SD1.5's tokenizer/ and
# SDXL's tokenizer/ and tokenizer_2/ (git ls-tree of both mirrors): the files written from
# open_clip's BPE merges must hash to these.
CLIP_VOCAB_GIT_BLOB = "469be27c5c010538f845f518c4f5e8574c78f7c8"  # vocab.json, 1,059,962 bytes
CLIP_MERGES_GIT_BLOB = "76e821f1b6f0a9709293c3b6b51ed90980b3166b"  # merges.txt, 524,619 bytes

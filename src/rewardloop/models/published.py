"""The published configs of the model families and their variants (full size), and what is known
of each checkpoint's weight files.

The configs are data: one folder per published checkpoint under ``models/families/published/``
(``<family>_<variant>``, laid out as its hub repository is: ``model_index.json``,
``unet/config.json``, ...), each file the JSON file of the published diffusers checkpoint, key for
key and in the file's own key order and formatting (``rewardloop.models.replicas`` writes them back
verbatim). A folder per checkpoint, mirroring the hub, so that a file can be diffed against a real
download and a new checkpoint is added by dropping its JSON files in; a variant's folder holds only
the files in which it differs from its family's default (``CHECKPOINT_FOLDERS`` says which folders
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

``published_files(family, variant)`` is the one loader of those files. ``VARIANTS[family]`` lists a
family's published checkpoints (the first is the default, the one PUBLISHED_FILES / WEIGHTS /
PUBLISHED_REPOS hold): repo, files, weights and, where a model card gives them, the sampling settings.
The ``SD15_UNET``-style names are the default checkpoints' files, by component.

``PUBLISHED_FILES[family]`` maps each JSON file's path in the checkpoint folder to its dict;
``WEIGHTS[family]`` says how each component's weights are stored (file stem, dtype, fp16 variant,
shards); ``PARAMETERS`` holds parameter counts with their sources and ``LFS_SIZES`` the byte
sizes of the published weight files (from the git-LFS pointers in the mirrors above), against
which the full-size configs are checked.
"""

from __future__ import annotations

import json
from pathlib import Path

PUBLISHED_DIR = Path(__file__).parent / "families" / "published"

# The folders each published checkpoint's files are read from, in order, a later folder's file
# replacing an earlier one's (a variant holds only the files in which it differs from its family's
# default). The first variant of a family is its default.
CHECKPOINT_FOLDERS: dict[str, dict[str, tuple[str, ...]]] = {
    "sd15": {"v1-5": ("sd15_v1-5",)},
    "sdxl": {"base-1.0": ("sdxl_base-1.0",)},
    "sd3": {"medium": ("sd3_medium",),
            "large": ("sd3_medium", "sd3_large"),
            # the Turbo's files were not found apart from Large's: Large's are used (reconstructed)
            "large-turbo": ("sd3_medium", "sd3_large")},
    "flux": {"dev": ("flux_dev",), "schnell": ("flux_dev", "flux_schnell")},
    "qwen_image": {"base": ("qwen_image_base",)},
}


class PublishedDataError(ValueError):
    """A published checkpoint's JSON folder is missing, unreadable or inconsistent."""


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


PUBLISHED_FILES: dict[str, dict[str, dict]] = {family: published_files(family) for family in CHECKPOINT_FOLDERS}

PUBLISHED_REPOS = {
    "sd15": "stable-diffusion-v1-5/stable-diffusion-v1-5",
    "sdxl": "stabilityai/stable-diffusion-xl-base-1.0",
    "sd3": "stabilityai/stable-diffusion-3.5-medium",
    "flux": "black-forest-labs/FLUX.1-dev",
    "qwen_image": "Qwen/Qwen-Image",
}

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
# The weight files: how they are stored, parameter counts and byte sizes, each with its source
# ---------------------------------------------------------------------------------------------

# How each model component's weights are stored: (weights file stem, dtype of the main file,
# whether an fp16 variant file sits beside it, number of shards). SD1.5 and SDXL: fp32 main files
# with *.fp16.safetensors variants (the mirrors' file lists). SD3.5-M: half precision, no
# variants; T5 in 2 shards (model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json).
# Its dtypes are not confirmed from the gated file list: the transformer in bfloat16 ("the official
# dtype for all 3.5 models is bfloat16", keras-team/keras-hub PR #2033 citing the model card; the
# HF SD3.5 blog: the original checkpoint is bfloat16), the text encoders in float16 as their
# configs say, the VAE in float16 (SD3 Medium's). A full replica written this way has T5 shards of
# 4,994,582,104 + 4,530,066,248 bytes (cut at 5 GB), a 4,939,433,672-byte transformer, a
# 247,323,896-byte text_encoder and a 167,666,654-byte VAE.
WEIGHTS: dict[str, dict[str, tuple[str, str, bool, int]]] = {
    "sd15": {
        "unet": ("diffusion_pytorch_model", "float32", True, 1),
        "vae": ("diffusion_pytorch_model", "float32", True, 1),
        "text_encoder": ("model", "float32", True, 1),
        "safety_checker": ("model", "float32", True, 1),
    },
    "sdxl": {
        "unet": ("diffusion_pytorch_model", "float32", True, 1),
        "vae": ("diffusion_pytorch_model", "float32", True, 1),
        "text_encoder": ("model", "float32", True, 1),
        "text_encoder_2": ("model", "float32", True, 1),
    },
    "sd3": {
        "transformer": ("diffusion_pytorch_model", "bfloat16", False, 1),
        "vae": ("diffusion_pytorch_model", "float16", False, 1),
        "text_encoder": ("model", "float16", False, 1),
        "text_encoder_2": ("model", "float16", False, 1),
        "text_encoder_3": ("model", "float16", False, 2),
    },
    # FLUX.1 (both variants; the hub trees above): the transformer in three shards (dev 9.98 + 9.95 +
    # 3.87 GB, schnell 9.96 + 9.95 + 3.87 GB: diffusers' 10 GB cut), T5 in two (4.99 + 4.53 GB:
    # transformers' 5 GB cut), CLIP (246 MB) and the VAE (168 MB) single files, no variants. All in 16
    # bits by those sizes; bfloat16 as the configs' torch_dtype says and as BFL's original
    # flux1-dev.safetensors is stored (its byte size is 2 x the parameters + a header, FILE_SIZES).
    "flux": {
        "transformer": ("diffusion_pytorch_model", "bfloat16", False, 3),
        "vae": ("diffusion_pytorch_model", "bfloat16", False, 1),
        "text_encoder": ("model", "bfloat16", False, 1),
        "text_encoder_2": ("model", "bfloat16", False, 2),
    },
    # Qwen-Image (the hub tree, published/README.md): the transformer in nine shards and Qwen2.5-VL in four, both
    # cut at 5 GB (4.99 GB and less each), the VAE (254 MB) a single file; bfloat16 by the configs and by the
    # index total sizes (2 bytes a parameter).
    "qwen_image": {
        "transformer": ("diffusion_pytorch_model", "bfloat16", False, 9),
        "vae": ("diffusion_pytorch_model", "bfloat16", False, 1),
        "text_encoder": ("model", "bfloat16", False, 4),
    },
}

# Parameter counts of full-size components that a source states exactly. SD1.5's UNet and CLIP
# ViT-L/14's text encoder: the figures the issue cites (859,520,964 and 123,060,480; SD1.5's
# model card rounds them to "860M" and "123M"); SDXL's UNet: 2,567,463,684 (the issue; "2.6B" in
# the SDXL paper). Each also fits the byte size of the published fp32 file (LFS_SIZES).
PARAMETERS = {
    ("sd15", "unet"): 859_520_964,
    ("sd15", "text_encoder"): 123_060_480,
    ("sdxl", "unet"): 2_567_463_684,
    ("sdxl", "text_encoder"): 123_060_480,
    # FLUX.1-dev's transformer: 11,901,408,320 (the figure). It fits the byte size of BFL's
    # single-file flux1-dev.safetensors, 23,802,932,552 bytes (the hub's tree API as recorded in public
    # code, e.g. ComfyUI model registries): 2 bytes x 11,901,408,320 + a 115,912-byte header
    # (FILE_SIZES). CLIP-L: SD1.5's text tower, the same 123,060,480.
    ("flux", "transformer"): 11_901_408_320,
    ("flux", "text_encoder"): 123_060_480,
    # Qwen-Image: the index total sizes / 2 (bfloat16), 40,860,802,176 and 16,584,333,312 bytes (the text
    # encoder with its vision tower), and the VAE's file of 253,806,966 bytes less its header
    ("qwen_image", "transformer"): 20_430_401_088,
    ("qwen_image", "text_encoder"): 8_292_166_656,
    ("qwen_image", "vae"): 126_892_531,
}

# Rounded figures: SD3.5 Medium "At 2.5 billion parameters" (Stability AI's release text, quoted
# by its API hosts). The transformer's weights file holds 2,469,663,936 values (2,243,171,520
# parameters + the 384x384 positional-embedding buffer); with the VAE in 16 bits that is the
# 4.76 GiB of the single-file sd3.5_medium.safetensors listed on model sites.
ROUNDED_PARAMETERS = {("sd3", "transformer"): (2.5e9, 0.05e9)}  # (figure, half the rounding step)

# Byte sizes of the published weight files: the git-LFS pointers ("size N") in the mirrors above.
# A safetensors file is its tensors (parameter count x bytes per element) plus a JSON header of
# some kilobytes, which bounds each component's parameter count from both sides.
LFS_SIZES = {
    "sd15": {
        "unet/diffusion_pytorch_model.safetensors": 3_438_167_540,
        "unet/diffusion_pytorch_model.fp16.safetensors": 1_719_125_304,
        "vae/diffusion_pytorch_model.safetensors": 334_643_276,
        "vae/diffusion_pytorch_model.fp16.safetensors": 167_335_342,
        "text_encoder/model.safetensors": 492_265_874,
        "text_encoder/model.fp16.safetensors": 246_144_864,
        "safety_checker/model.safetensors": 1_215_981_830,
        "safety_checker/model.fp16.safetensors": 608_018_440,
    },
    "sdxl": {
        "unet/diffusion_pytorch_model.safetensors": 10_270_077_736,
        "unet/diffusion_pytorch_model.fp16.safetensors": 5_135_149_760,
        "vae/diffusion_pytorch_model.safetensors": 334_643_268,
        "vae/diffusion_pytorch_model.fp16.safetensors": 167_335_342,
        "text_encoder/model.safetensors": 492_265_168,
        "text_encoder/model.fp16.safetensors": 246_144_152,
        "text_encoder_2/model.safetensors": 2_778_702_264,
        "text_encoder_2/model.fp16.safetensors": 1_389_382_176,
    },
}

# ---------------------------------------------------------------------------------------------
# Variants: the published checkpoints of one family that share its adapter (same pipeline class,
# component table and code path) but differ in configs or sizes. The first is the family's default
# (PUBLISHED_FILES / WEIGHTS / PUBLISHED_REPOS above hold it); CHECKPOINT_FOLDERS lists the same ones.
# ---------------------------------------------------------------------------------------------

# SD3.5 Large's storage (frankjoshua/stable-diffusion-3.5-large trees): the transformer in two
# bfloat16 shards (9.99 + 6.31 GB, diffusers' 10 GB cut; its index's total_size 16,292,561,536 =
# 2 x 8,146,280,768 values, adamo1139/stable-diffusion-3.5-large-turbo-ungated), text_encoder_2 as
# model.safetensors and model.fp16.safetensors of 1.39 GB each (both 16-bit), T5 in 4.99 + 4.53 GB
# shards, the VAE a 168 MB file. text_encoder's listing was not found: taken as text_encoder_2's.
_SD35_LARGE_WEIGHTS = {
    "transformer": ("diffusion_pytorch_model", "bfloat16", False, 2),
    "vae": ("diffusion_pytorch_model", "float16", False, 1),
    "text_encoder": ("model", "float16", True, 1),
    "text_encoder_2": ("model", "float16", True, 1),
    "text_encoder_3": ("model", "float16", False, 2),
}
# The Turbo card samples with num_inference_steps=4 and guidance_scale=0.0.
SD35_LARGE_TURBO_SAMPLING = {"num_inference_steps": 4, "guidance_scale": 0.0}

VARIANTS: dict[str, dict[str, dict]] = {
    "sd15": {"v1-5": {"repo": PUBLISHED_REPOS["sd15"], "files": PUBLISHED_FILES["sd15"], "weights": WEIGHTS["sd15"]}},
    "sdxl": {"base-1.0": {"repo": PUBLISHED_REPOS["sdxl"], "files": PUBLISHED_FILES["sdxl"],
                          "weights": WEIGHTS["sdxl"]}},
    "sd3": {
        "medium": {"repo": PUBLISHED_REPOS["sd3"], "files": PUBLISHED_FILES["sd3"], "weights": WEIGHTS["sd3"]},
        "large": {"repo": "stabilityai/stable-diffusion-3.5-large", "files": published_files("sd3", "large"),
                  "weights": _SD35_LARGE_WEIGHTS},
        "large-turbo": {"repo": "stabilityai/stable-diffusion-3.5-large-turbo",
                        "files": published_files("sd3", "large-turbo"), "weights": _SD35_LARGE_WEIGHTS,
                        "sampling": SD35_LARGE_TURBO_SAMPLING},
    },
    "flux": {
        "dev": {"repo": PUBLISHED_REPOS["flux"], "files": PUBLISHED_FILES["flux"], "weights": WEIGHTS["flux"],
                # the model card and FluxPipeline's docs: 50 steps at guidance 3.5; T5 at 512 tokens
                "sampling": {"num_inference_steps": 50, "guidance_scale": 3.5, "max_sequence_length": 512}},
        "schnell": {
            "repo": "black-forest-labs/FLUX.1-schnell",
            "files": published_files("flux", "schnell"),
            "weights": WEIGHTS["flux"],
            # the schnell model card's diffusers example: 4 steps, guidance 0, max_sequence_length 256
            "sampling": {"num_inference_steps": 4, "guidance_scale": 0.0, "max_sequence_length": 256},
        },
    },
    # Qwen-Image's model card: 50 steps, true CFG 4 against the negative prompt " ", 1328 x 1328
    "qwen_image": {"base": {"repo": PUBLISHED_REPOS["qwen_image"], "files": PUBLISHED_FILES["qwen_image"],
                            "weights": WEIGHTS["qwen_image"],
                            "sampling": {"num_inference_steps": 50, "true_cfg_scale": 4.0, "negative_prompt": " "}}},
}

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

# Parameter counts per variant (the defaults' are in PARAMETERS too). FLUX.1-schnell: dev's less the
# guidance embedder (Linear 256->3072 and 3072->3072 with biases: 10,229,760); its BFL single file
# flux1-schnell.safetensors is 23,782,506,688 bytes (the hub's tree API, as recorded in public code):
# 2 x 11,891,178,560 + a 149,568-byte header. SD3.5 Large (and Turbo): "8.1 billion parameters"
# (Stability AI's release text and model card); exactly 8,056,627,520, plus the 192 x 192 x 2432
# positional-embedding buffer = the 8,146,280,768 values of the published shard index. The FLUX VAE:
# 83,819,683 (BFL's fp32 ae.safetensors, 335,304,388 bytes = 4 x that + a 25,656-byte header).
VARIANT_PARAMETERS = {
    ("flux", "dev", "transformer"): 11_901_408_320,
    ("flux", "schnell", "transformer"): 11_891_178_560,
    ("flux", "dev", "text_encoder"): 123_060_480,
    ("flux", "schnell", "text_encoder"): 123_060_480,
    ("flux", "dev", "vae"): 83_819_683,
    ("flux", "schnell", "vae"): 83_819_683,
    ("sd3", "large", "transformer"): 8_056_627_520,
    ("sd3", "large-turbo", "transformer"): 8_056_627_520,
}
VARIANT_ROUNDED_PARAMETERS = {("sd3", "large", "transformer"): (8.1e9, 0.05e9),
                              ("sd3", "large-turbo", "transformer"): (8.1e9, 0.05e9),
                              ("flux", "dev", "transformer"): (12e9, 0.5e9),  # "12 billion parameter" (cards)
                              ("flux", "schnell", "transformer"): (12e9, 0.5e9)}

# Byte sizes of published single weight files that hold one component, with the bytes per stored
# value: (family, variant, component) -> (file, bytes, bytes per value). BFL's original
# flux1-*.safetensors and ae.safetensors (the hub tree API sizes recorded in public code: ComfyUI
# model registries and installers), and the SD3.5 Large transformer shards' index total_size.
FILE_SIZES = {
    ("flux", "dev", "transformer"): ("flux1-dev.safetensors", 23_802_932_552, 2),
    ("flux", "schnell", "transformer"): ("flux1-schnell.safetensors", 23_782_506_688, 2),
    ("flux", "dev", "vae"): ("ae.safetensors", 335_304_388, 4),
}
# (family, variant, component) -> total_size of the published shard index (no header: exact).
INDEX_TOTAL_SIZES = {("sd3", "large-turbo", "transformer"): 16_292_561_536}

# Byte sizes of the published JSON files where no copy of the file was at hand but the hub tree
# lists the size: each file of the checkpoint's folder (as replicas write it) must have it.
FLUX_CONFIG_SIZES = {
    "dev": {"model_index.json": 536, "scheduler/scheduler_config.json": 273, "transformer/config.json": 378,
            "vae/config.json": 820, "text_encoder/config.json": 613, "text_encoder_2/config.json": 782,
            "tokenizer/tokenizer_config.json": 705, "tokenizer/special_tokens_map.json": 588},
    "schnell": {"model_index.json": 536, "scheduler/scheduler_config.json": 274, "transformer/config.json": 321,
                "vae/config.json": 774, "text_encoder/config.json": 613, "text_encoder_2/config.json": 782,
                "tokenizer/tokenizer_config.json": 705, "tokenizer/special_tokens_map.json": 588},
}
SD35_LARGE_CONFIG_SIZES = {"model_index.json": 706, "scheduler/scheduler_config.json": 141,
                           "transformer/config.json": 397, "vae/config.json": 809,
                           "text_encoder_2/config.json": 570}

# The git blob ids of the published CLIP vocabulary files, identical in SD1.5's tokenizer/ and
# SDXL's tokenizer/ and tokenizer_2/ (git ls-tree of both mirrors): the files written from
# open_clip's BPE merges must hash to these.
CLIP_VOCAB_GIT_BLOB = "469be27c5c010538f845f518c4f5e8574c78f7c8"  # vocab.json, 1,059,962 bytes
CLIP_MERGES_GIT_BLOB = "76e821f1b6f0a9709293c3b6b51ed90980b3166b"  # merges.txt, 524,619 bytes

# The git blob ids of the published JSON files (git ls-tree of the mirrors above): the files of
# families/published/, and a config written from their dicts as json.dumps(d, indent=2) + "\n",
# reproduce each one byte for byte.
CONFIG_GIT_BLOBS = {
    "sd15": {
        "feature_extractor/preprocessor_config.json": "5294955ff7801083f720b34b55d0f1f51313c5c5",
        "model_index.json": "daf7e2e2dfc64fb437a2b44525667111b00cb9fc",
        "safety_checker/config.json": "5dbd88952e7e521aa665e5052e6db7def3641d03",
        "scheduler/scheduler_config.json": "82d05b0e688d7ea94675678646c427907419346e",
        "text_encoder/config.json": "4d3e873ab5086ad989f407abd50fdce66db8d657",
        "tokenizer/special_tokens_map.json": "2c2130b544c0c5a72d5d00da071ba130a9800fb2",
        "tokenizer/tokenizer_config.json": "5ba7bf706515bc60487ad0e1816b4929b82542d6",
        "unet/config.json": "1a02ee8abc93e840ffbcb2d68b66ccbcb74b3ab3",
        "vae/config.json": "55d78924fee13e4220f24320127c5f16284e13b9",
    },
    "sdxl": {
        "model_index.json": "6cc5138ddb67e9309c9b4e058e33e52087f1d215",
        "scheduler/scheduler_config.json": "e5bc8421e047838523be7acfb6720f167f7382f6",
        "text_encoder/config.json": "cde352ada4bb95fdad2fc503b8121257cef215a6",
        "text_encoder_2/config.json": "da1848b5ed17b676f021578838f12c4023b86379",
        "tokenizer/special_tokens_map.json": "2c2130b544c0c5a72d5d00da071ba130a9800fb2",
        "tokenizer/tokenizer_config.json": "2e8612a429492973fe60635b3f44a28b065cfac0",
        "tokenizer_2/special_tokens_map.json": "ae0c5be6f35217e51c4c000fd325d8de0294e99c",
        "tokenizer_2/tokenizer_config.json": "a8438e020c4497a429240d6b89e0bf9a6e2ffa92",
        "unet/config.json": "c8714c90f0e2409156da42781954416cb7df36af",
        "vae/config.json": "a66a171ba7c8efb1a8fc3bdc64e65318eade8e13",
    },
}

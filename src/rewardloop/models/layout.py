"""Can a local model folder run? Checked at startup, before any job, naming the file and what was expected.

A diffusers folder is read the way ``from_pretrained`` reads it (``model_index.json`` lists each
component as ``[library, class]``, ``[null, null]`` when absent, and each listed component lives in
a subfolder with its config), but from its small JSON files only: no weight is loaded. What would
otherwise fail minutes into the first job, or worse run wrongly, is refused here:
- a pipeline of another family, or a family's component missing (listed as null, or no folder);
- SD3.5's T5 half present: a ``tokenizer_3`` without ``text_encoder_3`` or the reverse;
- a scheduler class whose config the samplers cannot rebuild theirs from (see
  :mod:`rewardloop.sampling.schedulers`), or a flow scheduler in a UNet family's folder;
- a denoiser with no weights file, or only fp16 variant files while ``model.variant`` is unset;
- a guidance scale the folder's variant would ignore: FLUX.1-schnell (no guidance embedding) with
  ``generate.guidance_scale`` above 1 (:func:`check_guidance`).
"""

from __future__ import annotations

import json
from pathlib import Path

MODEL_INDEX = "model_index.json"
SCHEDULER_CONFIG = "scheduler/scheduler_config.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin")


class LayoutError(ValueError):
    pass


def read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise LayoutError(f"model.path: {path} is missing ({what})")
    try:
        value = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise LayoutError(f"model.path: {path} is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise LayoutError(f"model.path: {path} is not a JSON object ({what})")
    return value


def listed_components(index: dict) -> dict[str, str | None]:
    """{component: class name, or None for [null, null]} of a model_index.json."""
    return {k: (v[1] if isinstance(v, list) and len(v) == 2 else None)
            for k, v in index.items() if not k.startswith("_") and isinstance(v, (list, type(None)))}


def check_model_folder(path: str, family_name: str, variant: str | None = None) -> None:
    """``path`` is a local diffusers folder of ``family_name`` whose components can run (see the module)."""
    from rewardloop.models.families import FAMILIES, get_family

    folder = Path(path)
    family = get_family(family_name)
    index_file = folder / MODEL_INDEX
    if not index_file.is_file():
        raise LayoutError(f"model.path: {path} has no {MODEL_INDEX} (not a diffusers pipeline folder)")
    index = read_json(index_file, "the pipeline's component list")
    found = index.get("_class_name")
    if found != family.pipeline:
        other = {f.pipeline: f.name for f in FAMILIES.values()}
        hint = f", a model.family {other[found]} model," if found in other else ""
        raise LayoutError(f"model.path: {index_file} names {found!r}{hint} but model.family {family_name} expects "
                          f"{family.pipeline}")
    components = listed_components(index)
    optional = {name for group in family.optional_components.values() for name in group}  # e.g. SD3 without T5
    required = [family.denoiser, "vae", "scheduler", *family.text_encoders, *family.tokenizers]
    for name in required:
        if components.get(name) is None and name not in optional:
            state = "lists it as null" if name in components else "does not list it"
            raise LayoutError(f"model.path: {index_file} {state}: component {name!r}, which model.family "
                              f"{family_name} needs")
    for what, group in family.optional_components.items():  # all listed or all null (e.g. T5 and its tokenizer)
        listed = [name for name in group if components.get(name) is not None]
        if listed and len(listed) != len(group):
            lack = [name for name in group if name not in listed]
            raise LayoutError(f"model.path: {index_file} lists {', '.join(listed)} but not {', '.join(lack)}: "
                              f"{what} needs both (or list both as [null, null] to run without {what})")
    for name, cls in components.items():
        if cls is not None and name not in family.unused_components and not (folder / name).is_dir():
            raise LayoutError(f"model.path: {index_file} lists {name} ({cls}) but {folder / name}/ is missing")
    check_scheduler(folder, family)
    check_weights(folder / family.denoiser, variant)


def check_scheduler(folder: Path, family) -> None:
    from rewardloop.sampling.schedulers import shipped_schedulers

    config_file = folder / SCHEDULER_CONFIG
    config = read_json(config_file, "the noise schedule the samplers are built from")
    cls, allowed = config.get("_class_name"), shipped_schedulers(family.flow_matching)
    if cls not in allowed:
        kind = "a flow-match scheduler" if family.flow_matching else "a DDPM-style scheduler (betas, timestep spacing)"
        raise LayoutError(f"model.path: {config_file} names {cls!r}; model.family {family.name} expects {kind}: "
                          f"one of {', '.join(sorted(allowed))}")
    if not family.flow_matching and config.get("prediction_type", "epsilon") not in ("epsilon", "v_prediction"):
        raise LayoutError(f"model.path: {config_file}: prediction_type {config['prediction_type']!r} "
                          "(expected epsilon or v_prediction)")


def is_variant(name: str, variant: str) -> bool:
    """diffusers' variant file names: ``x.fp16.safetensors``, ``x.fp16-00001-of-00002.safetensors``."""
    return f".{variant}." in name or f".{variant}-" in name


def check_weights(component: Path, variant: str | None) -> None:
    """A weights file of ``variant`` (None: the main files) in ``component``."""
    files = [p.name for p in component.iterdir() if p.name.endswith(WEIGHT_SUFFIXES) or p.name.endswith(".index.json")]
    if any(is_variant(n, variant) if variant else not is_variant(n, "fp16") for n in files):
        return
    if not variant and files:
        raise LayoutError(f"model.path: {component}/ holds only fp16 variant weights ({', '.join(sorted(files))}); "
                          "set model.variant: fp16")
    what = f"{variant} variant weights (*.{variant}.safetensors)" if variant else "weights (*.safetensors or *.bin)"
    raise LayoutError(f"model.path: {component}/ has no {what}")


def check_resolution(path: str, family_name: str, resolution: int) -> None:
    """``generate.resolution`` fits the folder's VAE (its downscale factor) and, for a transformer, its patches."""
    from rewardloop.models.families import get_family

    folder, family = Path(path), get_family(family_name)
    vae = read_json(folder / "vae" / "config.json", "the VAE's config")
    denoiser = read_json(folder / family.denoiser / "config.json", f"the {family.denoiser}'s config")
    factor, what = family.resolution_factor(vae, denoiser)
    if resolution % factor:
        raise LayoutError(f"generate.resolution: {resolution} px is not a multiple of {factor} ({what}, "
                          f"{folder}); e.g. {max(factor, resolution // factor * factor)}")


def check_guidance(path: str, family_name: str, guidance_scale: float, key: str = "generate.guidance_scale") -> None:
    """``guidance_scale`` (the config's ``key``) is one the folder's denoiser reads. A family whose guidance is an input of the
    denoiser (``guidance`` "embedded", FLUX.1) runs no unconditional pass, so a checkpoint distilled without
    the guidance embedding (FLUX.1-schnell: its transformer config has ``guidance_embeds`` false) takes no
    guidance at all: a scale above 1 would be silently ignored, and is refused."""
    from rewardloop.models.families import get_family

    folder, family = Path(path), get_family(family_name)
    if family.guidance != "embedded" or float(guidance_scale) <= 1.0:
        return
    config_file = folder / family.denoiser / "config.json"
    if not read_json(config_file, f"the {family.denoiser}'s config").get("guidance_embeds", False):
        raise LayoutError(f"{key}: {float(guidance_scale):g}, but model.path {folder} has no guidance "
                          f"embedding ({config_file}: guidance_embeds false, a FLUX.1-schnell checkpoint): schnell "
                          f"takes no guidance, so the scale would be silently ignored; set {key}: 1")

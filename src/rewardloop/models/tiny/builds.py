"""The embedded tiny models' builds, and what proves that a shipped one is its builder's.

The default run's model ships in the repository (``resources/models/tiny-sd15``, 6 MB), so a first run
goes straight to the loop instead of pretraining for 12 minutes. :func:`build` is the one way a tiny
model is built (rule build_tiny_model, ``rewardloop build-tiny``, ``make tiny``); besides the family
builder's figures, its ``build_info.json`` records:

- ``recipe``: what the build was asked: family, seed, steps, pretraining prompts, torch threads and the
  CPU kernels it computed with (the same recipe gives the same bytes: docs/reliability.md);
- ``builder``: a digest of the builder's source (its module and the ``rewardloop.models`` modules it
  imports, with ``shape_domain``) and the versions of the libraries that compute the bytes;
- ``proof``: the sha256 of every weight file after the first :data:`PROOF_STEPS` optimizer steps of each
  phase of the same recipe (each phase's learning-rate schedule still that of the whole build).

tests/unit/models/test_shipped_models.py rebuilds the proof (seconds) and compares it on every run;
tests/workflow/test_shipped_model_rebuild.py rebuilds the whole model and compares its bytes when the
builder's digest differs from the recorded one (``make tiny-check``: always). A change to the builder
that changes the bytes fails one of them, with the way to refresh the weights.

The workflow uses a folder that is there when its ``recipe`` is the config's (:func:`check_existing`):
a copied or restored folder plans no build. One built from another recipe is refused, never rebuilt in
place, so that a build that is interrupted cannot delete a model that was complete before it started.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rewardloop.artifacts import atomic_path
from rewardloop.models.families import get_family

BUILD_INFO = "build_info.json"
PROOF_STEPS = 8  # per phase: the VAE's and the denoiser's (a few seconds on one core)
# The libraries whose arithmetic or files make the bytes (a new version may round differently)
LIBRARIES = ("torch", "diffusers", "transformers", "tokenizers", "numpy", "pillow", "safetensors")
# The modules a builder's source digest follows (besides the builder module): what it imports of these
SOURCE_PACKAGES = ("rewardloop.models.", "rewardloop.shape_domain")
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # src/rewardloop


class TinyBuildError(ValueError):
    """A tiny model folder the workflow cannot use as it is (its message names the folder and the fix)."""


def recipe_record(family: str, tiny: dict, cpu_kernels: str) -> dict:
    """What a build was asked, as ``build_info.json`` records it: the config's ``tiny`` section (or
    build-tiny's options) with the family and the CPU kernels' level (``avx2`` or ``native``)."""
    return {"family": family, "seed": tiny.get("seed", 0), "vae_steps": tiny["vae_steps"],
            "unet_steps": tiny["unet_steps"], "pretrain_on": tiny.get("pretrain_on", "train"),
            "threads": tiny["threads"], "cpu_kernels": cpu_kernels}


def _module_file(name: str) -> Path | None:
    rel = Path(*name.split(".")[1:])
    for candidate in (PACKAGE_ROOT / rel.with_suffix(".py"), PACKAGE_ROOT / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(path: Path) -> set[str]:
    """The ``rewardloop`` modules ``path`` imports anywhere in it (``from a import b``: ``a.b`` if a module)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {n for n in names if n.startswith("rewardloop.") and _module_file(n)}


def builder_sources(family: str) -> list[Path]:
    """The builder module of ``family`` and, transitively, the ``SOURCE_PACKAGES`` modules it imports."""
    start = get_family(family).tiny_builder.split(":")[0]
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [n for n in _imported(_module_file(name)) if n.startswith(SOURCE_PACKAGES)]
    return sorted(_module_file(name) for name in seen)


def builder_digest(family: str) -> dict:
    """sha256 of the builder's sources (:func:`builder_sources`) and the versions of :data:`LIBRARIES`."""
    digest = hashlib.sha256()
    files = builder_sources(family)
    for path in files:
        digest.update(str(path.relative_to(PACKAGE_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return {"sources": digest.hexdigest(), "files": [str(p.relative_to(PACKAGE_ROOT)) for p in files],
            "libraries": {name: importlib.metadata.version(name) for name in LIBRARIES}}


def weight_digests(folder: str | os.PathLike) -> dict[str, str]:
    """{path under ``folder``: sha256} of its weight files (``*.safetensors``)."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.safetensors"))}


def _builder(family: str):
    return get_family(family).tiny_build_function()


def _recipe_kwargs(recipe: dict) -> dict:
    """The builder's keyword arguments of a :func:`recipe_record`."""
    return {"seed": recipe["seed"], "vae_steps": recipe["vae_steps"], "unet_steps": recipe["unet_steps"],
            "pretrain_on": recipe["pretrain_on"], "num_threads": recipe["threads"]}


def proof(recipe: dict, steps: int = PROOF_STEPS) -> dict:
    """The weight digests after the first ``steps`` optimizer steps of each phase of ``recipe``, built
    in a temporary folder (computed with the kernels this process has; the caller pins them)."""
    with tempfile.TemporaryDirectory(prefix="rewardloop-tiny-proof.") as tmp:
        _builder(recipe["family"])(Path(tmp) / "model", progress=False, stop_after=steps, **_recipe_kwargs(recipe))
        return {"steps": steps, "sha256": weight_digests(Path(tmp) / "model")}


def build(out_dir: str | os.PathLike, recipe: dict, progress: bool = True) -> dict:
    """Build the tiny model of ``recipe`` (a :func:`recipe_record`) at ``out_dir`` (atomically: the
    folder there is replaced only by a complete build); return its build_info."""
    family = get_family(recipe["family"])
    if not family.tiny_pretrained:  # a random-init plumbing model: a seed is its whole recipe
        return _builder(family.name)(out_dir, seed=recipe["seed"])
    record = {"recipe": recipe, "builder": builder_digest(family.name), "proof": proof(recipe)}
    return _builder(family.name)(out_dir, progress=progress, record=record, **_recipe_kwargs(recipe))


def read_build_info(folder: str | os.PathLike) -> dict:
    """A tiny model folder's ``build_info.json`` ({} when absent or unreadable)."""
    try:
        info = json.loads((Path(folder) / BUILD_INFO).read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


@dataclass(frozen=True)
class Existing:
    """What the workflow does with a ``build_tiny`` model path: ``build`` it (absent), or use it as it is,
    with a ``warning`` when its builder's code or libraries changed since it was built."""

    build: bool
    warning: str | None = None


def check_existing(path: str | os.PathLike, recipe: dict) -> Existing:
    """Whether the workflow builds the tiny model at ``path`` for ``recipe`` (a :func:`recipe_record`).

    Absent: build it. There with the same recipe: use it, whoever built it (a clone's shipped folder, a
    copy, a restore). There with another recipe, or without the record of one: :class:`TinyBuildError`,
    naming what differs; the folder is never rebuilt in place.
    """
    path = Path(path)
    if not path.exists():
        return Existing(build=True)
    if not get_family(recipe["family"]).tiny_pretrained:  # a random-init plumbing model records no recipe
        return Existing(build=False)
    fix = (f"rebuild it with `rewardloop build-tiny --out {path}` and the recipe's options (it is replaced only "
           f"once the new build is complete), or set model.path to another folder, which the workflow builds")
    info = read_build_info(path)
    if not info.get("recipe"):
        raise TinyBuildError(f"model.path: {path} is there but has no {BUILD_INFO} with a recipe (not a complete "
                             f"tiny build of this version): {fix}; or set model.build_tiny: false to use it as it is")
    differs = {key: (info["recipe"].get(key), value) for key, value in recipe.items() if info["recipe"].get(key) != value}
    if differs:
        what = ", ".join(f"{key} {old!r} (built) vs {new!r} (config)" for key, (old, new) in differs.items())
        raise TinyBuildError(f"model.path: {path} was built with another recipe ({what}): {fix}")
    built_by = info.get("builder", {})
    current = builder_digest(recipe["family"])
    changed = [name for name in ("sources", "libraries") if built_by.get(name) != current[name]]
    warning = None
    if changed:
        warning = (f"rewardloop: {path} was built before its builder's {' and '.join(changed)} changed; it is used "
                   f"as it is (`make tiny-check` tells whether a rebuild gives the same bytes)")
    return Existing(build=False, warning=warning)


def rebuild_differences(folder: str | os.PathLike, cpu_kernels: str, progress: bool = True) -> list[str]:
    """Rebuild the tiny model at ``folder`` from its recorded recipe, in a temporary folder, and compare:
    one line per weight file whose bytes differ, or that only one of the two has (none: the same bytes).
    ``cpu_kernels``: the kernels this process computes with, which must be the recorded ones."""
    recipe = read_build_info(folder).get("recipe")
    if not recipe:
        raise TinyBuildError(f"{folder}: no {BUILD_INFO} with a recipe to rebuild from")
    if recipe["cpu_kernels"] != cpu_kernels:
        raise TinyBuildError(f"{folder} was built with the CPU kernels {recipe['cpu_kernels']!r}, this process "
                             f"computes with {cpu_kernels!r}: rebuild it under the same kernels")
    shipped = weight_digests(folder)
    with tempfile.TemporaryDirectory(prefix="rewardloop-tiny-rebuild.", dir=Path(folder).parent) as tmp:
        build(Path(tmp) / "model", recipe, progress=progress)
        rebuilt = weight_digests(Path(tmp) / "model")
    return [f"{name}: {'differs' if name in shipped and name in rebuilt else 'in only one of the two'}"
            for name in sorted(shipped.keys() | rebuilt.keys()) if shipped.get(name) != rebuilt.get(name)]


def refresh_builder_record(folder: str | os.PathLike) -> bool:
    """Record the current builder digest in ``folder``'s build_info (after a rebuild gave its bytes, so that
    the full rebuild of tests/workflow/test_shipped_model_rebuild.py is not repeated); whether it changed."""
    info = read_build_info(folder)
    current = builder_digest(info["recipe"]["family"])
    if info.get("builder") == current:
        return False
    info["builder"] = current
    with atomic_path(Path(folder) / BUILD_INFO) as tmp:
        Path(tmp).write_text(json.dumps(info, indent=2))
    return True

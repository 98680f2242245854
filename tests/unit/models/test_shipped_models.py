"""The tiny models that ship (resources/models/<name>/) are their builder's: the first steps of each one's
recipe, rebuilt here, give the digests its build_info.json recorded when it was built (models/tiny/builds.py).

A change to a builder that changes its first steps' bytes fails here, in seconds; one that changes only
later steps fails tests/workflow/test_shipped_model_rebuild.py, which rebuilds a whole model whenever its
builder's sources or libraries differ from those recorded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from rewardloop.host import cpu_kernels
from rewardloop.models.tiny import builds as tiny_builds

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "resources/models"
SHIPPED = sorted(path.parent for path in MODELS.glob(f"*/{tiny_builds.BUILD_INFO}"))
REFRESH = ("if the builder's change is meant, rebuild the shipped model with `make tiny` (or `rewardloop "
           "build-tiny --out FOLDER` and its recipe's options), commit the folder, and update what follows from "
           "its bytes (README's table, tests/workflow/test_default_run.py)")


def config_recipes() -> dict[str, dict[str, dict]]:
    """{model.path: {config file: recipe}} of config.yaml and every recipe of configs/ that builds a tiny model."""
    default = yaml.safe_load((ROOT / "config.yaml").read_text())
    found = {}
    for path in [ROOT / "config.yaml", *sorted((ROOT / "configs").glob("*.yaml"))]:
        config = yaml.safe_load(path.read_text())
        model = {**default["model"], **config.get("model", {})}
        if model["build_tiny"]:
            tiny = {**default["tiny"], **config.get("tiny", {})}
            kernels = cpu_kernels.level(config.get("cpu_kernels", default["cpu_kernels"]), config.get("device", "cpu"))
            found.setdefault(model["path"], {})[path.name] = tiny_builds.recipe_record(model["family"], tiny, kernels)
    return found


def test_the_default_model_ships():
    assert MODELS / "tiny-sd15" in SHIPPED


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda folder: folder.name)
def test_a_shipped_model_is_the_one_its_configs_build(folder):
    """The configs that name the folder ask its recipe, so the workflow uses it as it is."""
    info = tiny_builds.read_build_info(folder)
    recipes = config_recipes()
    name = str(folder.relative_to(ROOT))
    assert name in recipes, f"no config builds {name}: a shipped model no run uses"
    assert {config: info["recipe"] for config in recipes[name]} == recipes[name]


@pytest.mark.skipif(not cpu_kernels.has_avx2(), reason="the shipped bytes hold on x86-64 CPUs with AVX2")
@pytest.mark.parametrize("folder", SHIPPED, ids=lambda folder: folder.name)
def test_the_first_steps_of_a_shipped_recipe_give_the_recorded_digests(folder):
    import torch

    info = tiny_builds.read_build_info(folder)
    threads = torch.get_num_threads()
    try:
        rebuilt = tiny_builds.proof(info["recipe"], info["proof"]["steps"])
    finally:
        torch.set_num_threads(threads)  # the recipe's threads, set by the build, are not the suite's
    assert rebuilt == info["proof"], f"the tiny builder's first steps give other bytes than {folder.name}'s: {REFRESH}"
    assert set(rebuilt["sha256"]) == set(tiny_builds.weight_digests(folder))


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda folder: folder.name)
def test_a_shipped_folder_has_every_file_a_build_writes(folder, tmp_path):
    """A short build of the same family writes the same files (one left out of the repository fails here)."""
    info = tiny_builds.read_build_info(folder)
    tiny_builds.build(tmp_path / "model", {**info["recipe"], "vae_steps": 2, "unet_steps": 2}, progress=False)
    names = lambda root: sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert names(folder) == names(tmp_path / "model")
    assert info["builder"]["files"] == tiny_builds.builder_digest(info["recipe"]["family"])["files"]
    assert set(info["builder"]["libraries"]) == set(tiny_builds.LIBRARIES)
    assert 0 < info["proof"]["steps"] < min(info["recipe"]["vae_steps"], info["recipe"]["unet_steps"])


def test_check_existing_uses_a_folder_of_the_same_recipe_and_refuses_another(tmp_path):
    recipe = tiny_builds.read_build_info(MODELS / "tiny-sd15")["recipe"]
    assert tiny_builds.check_existing(tmp_path / "absent", recipe) == tiny_builds.Existing(build=True)
    copy = tmp_path / "copy"
    shutil.copytree(MODELS / "tiny-sd15", copy)
    assert not tiny_builds.check_existing(copy, recipe).build
    with pytest.raises(tiny_builds.TinyBuildError, match=r"another recipe \(seed 0 \(built\) vs 1 \(config\)\)"):
        tiny_builds.check_existing(copy, {**recipe, "seed": 1})
    (copy / "build_info.json").unlink()
    with pytest.raises(tiny_builds.TinyBuildError, match="has no build_info.json with a recipe"):
        tiny_builds.check_existing(copy, recipe)
    # a random-init plumbing model (sdxl) records no recipe: a folder there is used as it is
    assert not tiny_builds.check_existing(copy, {**recipe, "family": "sdxl"}).build


def test_check_existing_warns_when_the_builder_changed_since_the_build(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(MODELS / "tiny-sd15", copy)
    info = json.loads((copy / "build_info.json").read_text())
    info["builder"]["sources"] = "0" * 64
    (copy / "build_info.json").write_text(json.dumps(info))
    existing = tiny_builds.check_existing(copy, info["recipe"])
    assert not existing.build and "before its builder's sources changed" in existing.warning
    info["builder"] = tiny_builds.builder_digest("sd15")
    (copy / "build_info.json").write_text(json.dumps(info))
    assert tiny_builds.check_existing(copy, info["recipe"]).warning is None

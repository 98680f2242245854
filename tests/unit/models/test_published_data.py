"""The published checkpoints' JSON files (models/families/published/) and their one loader.

The values themselves are checked against the published files in tests/unit/models/test_replicas.py
(git blob ids, byte sizes); these tests hold the data folder and the loader to their rules.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from rewardloop.models import published as P
from rewardloop.models.published import (CHECKPOINT_FOLDERS, PUBLISHED_DIR, PublishedDataError, family_data,
                                         published_files)

from workflow_helpers import ROOT

JSON_FILES = sorted(PUBLISHED_DIR.rglob("*.json"))


def test_every_file_is_written_as_the_hub_writes_it():
    """indent 2, the file's key order, a final newline: replicas write the loaded dicts back byte for byte."""
    assert len(JSON_FILES) > 40
    for path in JSON_FILES:
        text = path.read_text()
        assert text == json.dumps(json.loads(text), indent=2) + "\n", path


def test_the_package_data_ships_every_json_file_and_every_family_s_data_file():
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = ROOT / "src" / "rewardloop"
    shipped = {p for pattern in table["rewardloop"] for p in package.glob(pattern)}
    assert set(JSON_FILES) <= shipped
    assert {PUBLISHED_DIR / f"{family}.yaml" for family in P.FAMILY_DATA} <= shipped


def test_every_folder_belongs_to_a_checkpoint_and_the_variant_tables_agree():
    used = {name for variants in CHECKPOINT_FOLDERS.values() for folders in variants.values() for name in folders}
    assert used == {p.name for p in PUBLISHED_DIR.iterdir() if p.is_dir()}
    # the same variants, the default first, in VARIANTS (repos, weights) as in CHECKPOINT_FOLDERS (files)
    assert {f: list(v) for f, v in P.VARIANTS.items()} == {f: list(v) for f, v in CHECKPOINT_FOLDERS.items()}


def test_a_variant_replaces_only_the_files_its_folder_holds():
    dev, schnell = published_files("flux"), published_files("flux", "schnell")
    assert set(dev) == set(schnell)
    changed = {path for path in dev if dev[path] != schnell[path]}
    assert changed == {p.relative_to(PUBLISHED_DIR / "flux_schnell").as_posix()
                       for p in (PUBLISHED_DIR / "flux_schnell").rglob("*.json")}
    assert published_files("sd3", "large-turbo") == published_files("sd3", "large")


def test_each_call_returns_fresh_dicts():
    files = published_files("sd15")
    files["unet/config.json"]["in_channels"] = 9
    assert published_files("sd15")["unet/config.json"]["in_channels"] == 4


def test_unknown_family_and_variant_name_the_choices():
    with pytest.raises(PublishedDataError, match="family: unknown 'sd2'.*flux, qwen_image, sd15, sd3, sdxl"):
        published_files("sd2")
    with pytest.raises(PublishedDataError, match="variant: unknown 'pro' for family flux.*dev, schnell"):
        published_files("flux", "pro")


def _write(root: Path, folder: str, path: str, text: str) -> Path:
    target = root / folder / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def test_a_variant_file_the_default_lacks_is_refused(tmp_path):
    _write(tmp_path, "flux_dev", "model_index.json", "{}\n")
    _write(tmp_path, "flux_schnell", "unet/config.json", "{}\n")
    with pytest.raises(PublishedDataError, match=r"unet/config\.json is not a file of flux_dev"):
        published_files("flux", "schnell", root=tmp_path)


def test_a_missing_folder_and_bad_json_name_the_path(tmp_path):
    with pytest.raises(PublishedDataError, match=r"sd15_v1-5: no published JSON files"):
        published_files("sd15", root=tmp_path)
    bad = _write(tmp_path, "sd15_v1-5", "vae/config.json", '{"act_fn": "silu",}\n')
    with pytest.raises(PublishedDataError, match=f"{bad}: not valid JSON"):
        published_files("sd15", root=tmp_path)


def test_each_family_s_data_file_holds_its_checkpoints_and_a_bad_one_is_named(tmp_path):
    """A family is its adapter, its JSON folders and its data file (<family>.yaml): every folder a data file names
    is there, every family with an adapter has one, and a broken file is refused naming the file and the key."""
    from rewardloop.models.families import FAMILIES

    assert set(P.FAMILY_DATA) == set(FAMILIES)
    for family, data in P.FAMILY_DATA.items():
        for name, variant in data["variants"].items():
            assert all((PUBLISHED_DIR / folder).is_dir() for folder in variant["folders"]), (family, name)
            assert set(variant["weights"]) <= set(P.VARIANTS[family][name]["files"]["model_index.json"])
        assert set(data["tiny"]) <= set(P.PUBLISHED_FILES[family])  # a tiny replica changes published files only
    with pytest.raises(PublishedDataError, match=r"sd2\.yaml: cannot read the family's data file"):
        family_data("sd2", root=tmp_path)
    (tmp_path / "sd2.yaml").write_text("variants: {base: {repo: a/b}\n")
    with pytest.raises(PublishedDataError, match=r"sd2\.yaml: not valid YAML"):
        family_data("sd2", root=tmp_path)
    (tmp_path / "sd2.yaml").write_text("variants: {base: {repo: a/b, folders: [sd2_base], weights: {}}}\n")
    with pytest.raises(PublishedDataError, match=r"sd2\.yaml: expected a mapping with `variants` .* and `tiny`"):
        family_data("sd2", root=tmp_path)
    (tmp_path / "sd2.yaml").write_text("variants: {base: {repo: a/b, folders: [sd2_base]}}\ntiny: {}\n")
    with pytest.raises(PublishedDataError, match=r"sd2\.yaml: variants\.base lacks weights"):
        family_data("sd2", root=tmp_path)

"""The default config's model folder (model.build_tiny: true): a folder that is already there with the
config's recipe is used, not rebuilt; one built with another recipe is refused and kept, never rebuilt
in place (rules/model.smk, src/rewardloop/models/tiny/builds.py). The real `snakemake`, dry runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

from workflow_helpers import ROOT, SNAKEMAKE, file_digests, planned_jobs, snakemake

pytestmark = pytest.mark.workflow

MODEL = "resources/models/tiny-sd15"


@pytest.fixture
def work(tmp_path):
    """A work folder of the default config (its prompt files where they live), without a model folder."""
    overlay = {"prompts": {k: str(ROOT / f"resources/prompts/{k}.txt") for k in ("train", "eval")}}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(overlay))
    return tmp_path


def test_a_copied_model_folder_plans_no_build_and_an_absent_one_plans_it(work):
    assert planned_jobs(snakemake(work, "-n"))[("build_tiny_model", "")] == 1
    shutil.copytree(ROOT / MODEL, work / MODEL)  # copied from a clone, or restored from a backup
    plan = planned_jobs(snakemake(work, "-n"))
    assert ("build_tiny_model", "") not in plan and plan[("generate", "it=000")] == 1


def test_a_folder_of_another_recipe_is_refused_and_kept(work):
    shutil.copytree(ROOT / MODEL, work / MODEL)
    info = json.loads((work / MODEL / "build_info.json").read_text())
    info["recipe"]["unet_steps"] = 600  # as if built by `tiny: {unet_steps: 600}`
    (work / MODEL / "build_info.json").write_text(json.dumps(info))
    before = file_digests(work / MODEL)
    for args in (("-n",), ()):
        result = subprocess.run([SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile",
                                 str(work / "test.yaml"), "--cores", "1", *args],
                                capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert (f"model.path: {MODEL} was built with another recipe (unet_steps 600 (built) vs 1200 (config))"
                in output), output[-2000:]
        assert f"rewardloop build-tiny --out {MODEL}" in output
    assert file_digests(work / MODEL) == before  # nothing deleted, nothing rewritten

"""`snakemake --config ...` values: Snakemake reads a list or a nested mapping with YAML's BaseLoader,
so every item in it arrives as a string; ``rewardloop.config.validate`` (what the Snakefile runs on
``config``) types them by the schema, as it does a nested scalar."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from snakemake.cli import parse_config

from rewardloop import config as cfgmod
from rewardloop.config import ConfigError
from workflow_helpers import ROOT, SNAKEMAKE, planned_jobs, write_overlay

PROMPTS = {key: str(ROOT / f"resources/prompts/{key}.txt") for key in ("train", "eval")}


def with_command_line(*entries: str) -> dict:
    """config.yaml with ``--config entries`` merged over it, as Snakemake hands it to the Snakefile."""
    given = yaml.safe_load((ROOT / "config.yaml").read_text())
    given["prompts"] = dict(PROMPTS)
    return cfgmod.deep_merge(given, parse_config(list(entries)))


@pytest.mark.parametrize("entry, path, typed", [
    ("seeds=[0,1]", ("seeds",), [0, 1]),
    ("eval={seeds: [0, 1]}", ("eval", "seeds"), [0, 1]),
    ("eval={also_at_guidance: [1, 4.5]}", ("eval", "also_at_guidance"), [1.0, 4.5]),
    ("generate={sde: {window_range: [0, 4]}}", ("generate", "sde", "window_range"), [0, 4]),
    ("rewards={color_match: 2}", ("rewards", "color_match"), 2.0),  # a weight: number or {weight: ...}
    ("rewards={color_match: {weight: 0.5}}", ("rewards", "color_match", "weight"), 0.5),
    ("train={lora: {targets: [to_q, to_v]}}", ("train", "lora", "targets"), ["to_q", "to_v"]),
])
def test_list_items_and_nested_values_get_the_schemas_type(entry, path, typed):
    config = cfgmod.validate(with_command_line(entry))
    for key in path:
        config = config[key]
    assert repr(config) == repr(typed)  # 2.0, not 2 nor '2'


def test_a_list_item_of_the_wrong_type_is_still_named():
    with pytest.raises(ConfigError, match=r"eval\.seeds\.1: 'x' is not of type 'integer'"):
        cfgmod.validate(with_command_line("eval={seeds: [0, x]}"))


@pytest.mark.workflow
def test_a_dry_run_with_seeds_from_the_command_line_plans_each_seed(tmp_path):
    """The real `snakemake -n --config seeds=[0,1]` on the embedded default (no model needed to plan)."""
    write_overlay(tmp_path, {"prompts": PROMPTS})
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile",
           str(tmp_path / "test.yaml"), "--cores", "1", "-n", "--config", "seeds=[0,1]", "experiments={a: {}}"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert {rule for rule, _ in planned_jobs(result) if rule.endswith("_train")} == {"a_seed0_train", "a_seed1_train"}


def test_the_slurm_profile_is_one_the_installed_snakemake_accepts():
    """Issue 46 §7: profiles/slurm names `executor: slurm`, which a Snakemake without its executor plugin refuses
    in its argument parser ("invalid choice: 'slurm'" after a usage dump), before any workflow code could say what
    is missing; so the plugin is installed with rewardloop itself, and the profile is accepted as it is."""
    import importlib.metadata

    requires = importlib.metadata.requires("rewardloop") or []
    assert any(r.startswith("snakemake-executor-plugin-slurm") and "extra ==" not in r for r in requires), requires
    run = subprocess.run([SNAKEMAKE, "--profile", str(ROOT / "profiles/slurm"), "--version"], capture_output=True,
                         text=True)
    assert run.returncode == 0 and "invalid choice" not in run.stderr, run.stderr[-2000:]

"""Config validation: defaults, unknown keys, types and the checks beyond the schema."""

import copy

import pytest
import yaml

from rewardloop import config as cfgmod
from rewardloop.config import ConfigError


@pytest.fixture
def base_config(repo_root, tmp_path):
    cfg = yaml.safe_load((repo_root / "config.yaml").read_text())
    cfg["prompts"] = {
        "train": str(repo_root / "resources/prompts/train.txt"),
        "eval": str(repo_root / "resources/prompts/eval.txt"),
    }
    return cfg


def test_defaults_are_filled_recursively(base_config):
    cfg = cfgmod.validate(base_config)
    assert cfg["train"]["max_grad_norm"] == 1.0
    assert cfg["train"]["lora"]["targets"][0] == "to_q"
    assert cfg["export"]["merged"] is False


def test_shipped_config_is_valid(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    assert cfgmod.load(repo_root / "config.yaml")["iterations"] == 3


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"trian": {"steps": 1}}, "Additional properties are not allowed ('trian'"),
        ({"train": {"stpes": 1}}, "train: Additional properties"),
        ({"train": {"steps": "ten"}}, "train.steps: 'ten' is not of type 'integer'"),
        ({"iterations": 0}, "iterations: 0 is less than the minimum of 1"),
        ({"generate": {"batch_size": -1}}, "generate.batch_size: -1 is less than the minimum"),
        ({"rewards": {"color_match": "high"}}, "rewards.color_match"),
        ({"train": {"loss": "ppo"}}, "train.loss: 'ppo' is not one of"),
    ],
)
def test_schema_errors_name_the_key(base_config, patch, message):
    with pytest.raises(ConfigError) as info:
        cfgmod.validate(cfgmod.deep_merge(base_config, patch))
    assert message in str(info.value)


def test_resolution_must_divide_by_8(base_config):
    base_config["generate"]["resolution"] = 36
    with pytest.raises(ConfigError, match="generate.resolution: 36 is not divisible by 8"):
        cfgmod.validate(base_config)


def test_missing_model_folder_is_named(base_config, tmp_path):
    base_config["model"] = {"path": str(tmp_path / "nope"), "build_tiny": False}
    with pytest.raises(ValueError, match="model.path: .*nope is not a folder"):
        cfgmod.validate(base_config)
    (tmp_path / "empty").mkdir()
    base_config["model"]["path"] = str(tmp_path / "empty")
    with pytest.raises(ValueError, match="has no model_index.json"):
        cfgmod.validate(base_config)


def test_unknown_reward_is_named(base_config):
    base_config["rewards"] = {"pickscroe": 1.0}
    with pytest.raises(ValueError, match="unknown reward 'pickscroe'"):
        cfgmod.validate(base_config)


def test_empty_prompt_file_is_named(base_config, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    base_config["prompts"]["eval"] = str(empty)
    with pytest.raises(ValueError, match=r"prompts.eval \(.*empty.txt\): no prompts"):
        cfgmod.validate(base_config)


def test_ocr_reward_needs_quoted_targets(base_config):
    base_config["rewards"] = {"ocr": 1.0}
    with pytest.raises(ConfigError, match=r"prompts.train .*no.*quoted|prompts.train .*has none"):
        cfgmod.validate(base_config)


def test_stage_config_is_a_copy_of_the_sections(base_config):
    cfg = cfgmod.validate(base_config)
    sub = cfgmod.stage_config(cfg, "train")
    sub["train"]["steps"] = -5
    assert cfg["train"]["steps"] != -5 and set(sub) == {"train"}
    assert "iterations" not in cfgmod.stage_config(cfg, "seed", "model")


def test_eval_reward_may_not_repeat_a_training_reward(base_config):
    base_config["eval"] = {"rewards": {"color_match": 1.0}}
    with pytest.raises(ConfigError, match="eval.rewards: color_match already in rewards"):
        cfgmod.validate(base_config)


def test_malformed_yaml_names_the_file(tmp_path):
    path = tmp_path / "my.yaml"
    path.write_text("train: {steps: 2\n")
    with pytest.raises(ConfigError, match=rf"{path}: not valid YAML"):
        cfgmod.load(path)

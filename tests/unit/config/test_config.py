"""Config validation: defaults, unknown keys, types and the checks beyond the schema."""

import copy
import subprocess
import sys

import pytest
import yaml

from rewardloop import config as cfgmod
from rewardloop.config import ConfigError
from rewardloop.runtime.job_config import eval_config, eval_guidance_key, eval_guidance_scale, guidance_evals, stage_config


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
    sub = stage_config(cfg, "train")
    sub["train"]["steps"] = -5
    assert cfg["train"]["steps"] != -5 and set(sub) == {"train"}
    assert "iterations" not in stage_config(cfg, "seed", "model")


def test_eval_reward_may_not_repeat_a_training_reward(base_config):
    base_config["eval"] = {"rewards": {"color_match": 1.0}}
    with pytest.raises(ConfigError, match="eval.rewards: color_match already in rewards"):
        cfgmod.validate(base_config)


def test_malformed_yaml_names_the_file(tmp_path):
    path = tmp_path / "my.yaml"
    path.write_text("train: {steps: 2\n")
    with pytest.raises(ConfigError, match=rf"{path}: not valid YAML"):
        cfgmod.load(path)


def test_importing_the_config_loads_no_torch():
    """The Snakefile and the CLI import the config first: its checks' heavy imports wait until they run."""
    probe = "import sys, rewardloop.config; print(sorted(m for m in ('torch', 'diffusers') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"


def test_the_schema_file_is_found_from_the_package():
    assert cfgmod.SCHEMA_PATH.is_file() and cfgmod.SCHEMA_PATH.parent.name == "schemas"


def test_the_eval_samples_at_generates_guidance_only_where_its_own_is_null(base_config):
    """One fallback, read the same from the whole config and from what an eval job is passed."""
    base_config["generate"]["guidance_scale"] = 5.0
    cfg = cfgmod.validate(base_config)
    assert eval_guidance_key(cfg) == "generate.guidance_scale" and eval_guidance_scale(cfg) == 5.0
    job = eval_config(cfg)
    assert job["generate"]["guidance_scale"] == 5.0 and eval_guidance_scale(job) == 5.0
    cfg["eval"]["guidance_scale"] = 2.5
    job = eval_config(cfg)
    assert eval_guidance_key(cfg) == "eval.guidance_scale" and "guidance_scale" not in job["generate"]
    assert eval_guidance_scale(job) == eval_guidance_scale(cfg) == 2.5
    assert eval_guidance_scale(eval_config(cfg, 1)) == 1.0  # a further eval of eval.also_at_guidance


def test_further_guidance_evals_are_named_by_their_scale_and_exclude_the_eval_own(base_config):
    base_config["eval"] = {"also_at_guidance": [1, 4.5]}
    cfg = cfgmod.validate(copy.deepcopy(base_config))
    assert guidance_evals(cfg) == {"eval_cfg1": 1.0, "eval_cfg4.5": 4.5}
    assert "also_at_guidance" not in eval_config(cfg, 4.5)["eval"]
    base_config["eval"]["guidance_scale"] = 4.5
    with pytest.raises(ConfigError, match=r"^eval\.also_at_guidance: 4\.5 is the eval's own CFG scale"):
        cfgmod.validate(base_config)


def test_fewer_iterations_than_the_results_hold_are_refused_naming_the_folders(base_config, tmp_path):
    for name in ("iter_000", "iter_001", "iter_002", "iter_1000", "base"):
        (tmp_path / name).mkdir()
    (tmp_path / "iter_003").write_text("a file, not an iteration folder")
    cfgmod.check_existing_iterations({"iterations": 3}, tmp_path)
    with pytest.raises(ConfigError, match=rf"^iterations: 1, but {tmp_path}/ already holds iter_001, iter_002 of a "
                                          rf"longer run; set iterations: 3 to keep them"):
        cfgmod.check_existing_iterations({"iterations": 1}, tmp_path)

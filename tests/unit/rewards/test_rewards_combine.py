import json

import numpy as np
import pytest
from PIL import Image

from rewardloop.rewards import register
from rewardloop.rewards.combine import RewardSet, parse_reward_specs
from rewardloop.rewards.jpeg import jpeg_size_kb


def _images():
    rng = np.random.default_rng(0)
    noise = Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
    return [Image.new("RGB", (32, 32), "white"), noise, Image.new("RGB", (32, 32), "red")]


def test_parse_specs_numbers_and_mappings():
    specs = parse_reward_specs({"jpeg_compressibility": 1, "ocr": {"weight": 2.5, "backend": "x"}})
    assert specs == [("jpeg_compressibility", 1.0, {}), ("ocr", 2.5, {"backend": "x"})]


@pytest.mark.parametrize(
    "cfg, key",
    [
        ({"jpeg_compressibility": "heavy"}, "rewards.jpeg_compressibility"),
        ({"jpeg_compressibility": True}, "rewards.jpeg_compressibility"),
        ({"ocr": {"backend": "rapidocr"}}, "rewards.ocr"),
        ({"ocr": {"weight": "1"}}, "rewards.ocr.weight"),
        ({"ocr": [1]}, "rewards.ocr"),
        ({"ocr": float("nan")}, "rewards.ocr"),
        ({}, "rewards"),
    ],
)
def test_parse_specs_errors_name_the_key(cfg, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        parse_reward_specs(cfg)


def test_unknown_reward_is_an_error():
    with pytest.raises(ValueError, match="no_such_reward"):
        RewardSet({"no_such_reward": 1.0})


def test_weighted_sum_and_component_columns():
    images = _images()
    rewards = RewardSet({"jpeg_compressibility": 2.0, "jpeg_incompressibility": {"weight": 0.5}})
    table = rewards.score(images, ["p"] * 3, batch_size=2)
    sizes = np.array([jpeg_size_kb(im) for im in images])
    assert list(table.columns) == [
        "reward", "reward_jpeg_compressibility", "reward_jpeg_incompressibility", "reward_details"
    ]
    np.testing.assert_allclose(table["reward_jpeg_compressibility"], -sizes)
    np.testing.assert_allclose(table["reward_jpeg_incompressibility"], sizes)
    np.testing.assert_allclose(table["reward"], -1.5 * sizes)
    details = json.loads(table["reward_details"][1])
    assert details == {"jpeg_compressibility": {}, "jpeg_incompressibility": {}}


def test_empty_input_gives_empty_table():
    table = RewardSet({"jpeg_compressibility": 1.0}).score([], [])
    assert len(table) == 0 and "reward" in table.columns


class _NanOnBadPrompt:
    """Scores 1, or NaN where the prompt is "bad"."""

    name = "test_combine_nan_on_bad_prompt"

    def check_prompts(self, prompts):
        pass

    def score(self, images, prompts):
        scores = np.array([np.nan if p == "bad" else 1.0 for p in prompts])
        return scores, [{"note": np.float32(1.5)} for _ in images]


register("test_combine_nan_on_bad_prompt")(_NanOnBadPrompt)  # unique name; stays registered


def test_non_finite_score_names_reward_and_sample():
    rewards = RewardSet({"test_combine_nan_on_bad_prompt": 1.0})
    prompts = ["p", "p", "p", "bad", "p", "p"]
    with pytest.raises(ValueError, match=r"test_combine_nan_on_bad_prompt.*sample index 3"):
        rewards.score(_images() + _images(), prompts, batch_size=2)
    # Details holding numpy scalars still serialise.
    table = rewards.score(_images()[:1], ["p"])
    details = json.loads(table["reward_details"][0])
    assert details == {"test_combine_nan_on_bad_prompt": {"note": 1.5}}


def test_check_prompts_runs_every_reward():
    pytest.importorskip("rapidocr")
    with pytest.raises(ValueError, match="prompt 0"):
        RewardSet({"ocr": 1.0}).check_prompts(["no quotes"])


def test_score_rejects_length_mismatch():
    with pytest.raises(ValueError, match="2 images but 1 prompts"):
        RewardSet({"jpeg_compressibility": 1.0}).score(_images()[:2], ["p"])

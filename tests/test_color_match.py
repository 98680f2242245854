import numpy as np
import pytest

from rewardloop import synthetic
from rewardloop.rewards.color_match import ColorMatch, palette_assignment


@pytest.fixture
def reward():
    return ColorMatch()


def test_right_caption_beats_wrong_colours(reward):
    rng = np.random.default_rng(0)
    for shape, fg, bg in [("circle", "red", "blue"), ("triangle", "white", "black"), ("square", "cyan", "purple")]:
        image = synthetic.render(shape, fg, bg, rng=rng)
        others = [c for c in synthetic.COLORS if c not in (fg, bg)]
        prompts = [synthetic.caption(shape, fg, bg), synthetic.caption(shape, bg, fg),
                   synthetic.caption(shape, others[0], bg), synthetic.caption(shape, fg, others[1]),
                   synthetic.caption(shape, others[0], others[1])]
        scores, details = reward.score([image] * len(prompts), prompts)
        assert scores[0] == 2.0
        assert max(scores[1:]) < 1.6  # swapped colours earn up to ~1.55
        assert scores[-1] == 0.0
        assert set(details[0]) == {"fg_fraction", "bg_fraction"}


def test_noise_scores_low(reward):
    noise = np.random.default_rng(1).integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    scores, _ = reward.score([noise], [synthetic.caption("square", "red", "blue")])
    assert scores[0] < 0.6


def test_hand_computed_value(reward):
    # 4x4 image: 4 red pixels, 10 blue pixels, 1 near-blue pixel, 1 grey (unassigned) pixel
    image = np.zeros((4, 4, 3), dtype=np.uint8)
    image[...] = synthetic.PALETTE["blue"]
    image[0, :] = synthetic.PALETTE["red"]
    image[3, 3] = (50, 70, 200)  # distance ~30 from blue
    image[3, 2] = (128, 128, 128)  # > 80 from every palette colour
    scores, details = reward.score([image], ["a red square on a blue background"])
    assert details[0] == pytest.approx({"fg_fraction": 4 / 16, "bg_fraction": 11 / 16})
    # square areas range over 4 * 0.2**2 = 0.16 .. 4 * 0.3**2 = 0.36
    assert scores[0] == pytest.approx(1.0 + 1.0)
    scores, _ = reward.score([image], ["a blue square on a red background"])
    assert scores[0] == pytest.approx(1.0 + (4 / 16) / (1 - 0.36))
    assert palette_assignment(image)[-2] == -1


def test_check_prompts_names_bad_prompt(reward):
    reward.check_prompts(["a red circle on a blue background"])
    with pytest.raises(ValueError, match="a cat"):
        reward.check_prompts(["a red circle on a blue background", "a cat"])


def test_registered():
    from rewardloop.rewards.base import build_reward
    assert build_reward("color_match").name == "color_match"

import numpy as np
import pytest

from rewardloop import shape_domain
from rewardloop.models.tiny import synthetic
from rewardloop.rewards.color_match import ColorMatch


@pytest.fixture
def reward():
    return ColorMatch()


def test_right_caption_beats_wrong_colours(reward):
    rng = np.random.default_rng(0)
    for shape, fg, bg in [("circle", "red", "blue"), ("triangle", "white", "black"), ("square", "cyan", "purple")]:
        image = synthetic.render(shape, fg, bg, rng=rng)
        others = [c for c in shape_domain.COLORS if c not in (fg, bg)]
        prompts = [shape_domain.caption(shape, fg, bg), shape_domain.caption(shape, bg, fg),
                   shape_domain.caption(shape, others[0], bg), shape_domain.caption(shape, fg, others[1]),
                   shape_domain.caption(shape, others[0], others[1])]
        scores, details = reward.score([image] * len(prompts), prompts)
        assert scores[0] > 1.95  # crisp render (anti-aliased edge pixels lose a little)
        assert scores[1] < 1.3  # swapped: the named background colour covers only the shape's area
        assert max(scores[1:]) < scores[0] - 0.5
        assert scores[-1] < 0.1
        assert set(details[0]) == {"purity", "presence"}


def test_score_falls_smoothly_as_colours_wash_out(reward):
    image = np.asarray(synthetic.render("square", "red", "blue", rng=np.random.default_rng(0)), dtype=np.float32)
    grey = np.full_like(image, 128.0)
    prompt = "a red square on a blue background"
    scores = [reward.score([(1 - w) * image + w * grey], [prompt])[0][0] for w in (0.0, 0.1, 0.2, 0.4)]
    assert scores == sorted(scores, reverse=True) and len(set(np.round(scores, 6))) == 4
    assert scores[1] < 2.0 and scores[1] > 1.5


def test_noise_scores_low(reward):
    noise = np.random.default_rng(1).integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    scores, _ = reward.score([noise], [shape_domain.caption("square", "red", "blue")])
    assert scores[0] < 0.6


def test_hand_computed_value(reward):
    # 4x4: 4 red pixels, 11 blue, 1 pixel at distance 60 from blue (membership 0.5 in blue, 0 in red)
    image = np.zeros((4, 4, 3), dtype=np.float32)
    image[...] = shape_domain.PALETTE["blue"]
    image[0, :] = shape_domain.PALETTE["red"]
    blue = np.asarray(shape_domain.PALETTE["blue"], dtype=np.float32)
    direction = np.array([1.0, 0.0, 0.0]) if blue[0] < 128 else np.array([-1.0, 0.0, 0.0])
    image[3, 3] = blue + 60 * direction
    _, details = reward.score([image], ["a red square on a blue background"])
    purity = (4 + 11 + 0.5) / 16
    f_bg = (11 + 0.5) / 16
    a_min, a_max = shape_domain.area_fraction_range("square")
    presence = min(1, (4 / 16) / (a_min / 2)) * min(1, f_bg / (1 - a_max))
    assert details[0]["purity"] == pytest.approx(purity)
    assert details[0]["presence"] == pytest.approx(presence)
    scores, _ = reward.score([image], ["a red square on a blue background"])
    assert scores[0] == pytest.approx(2 * purity * presence)


def test_one_colour_alone_scores_zero(reward):
    flat = np.zeros((8, 8, 3), dtype=np.uint8) + np.asarray(shape_domain.PALETTE["blue"], dtype=np.uint8)
    scores, _ = reward.score([flat], ["a red circle on a blue background"])
    assert scores[0] == 0.0


def test_check_prompts_names_bad_prompt(reward):
    reward.check_prompts(["a red circle on a blue background"])
    with pytest.raises(ValueError, match="a cat"):
        ColorMatch.check_prompts(["a red circle on a blue background", "a cat"])


def test_registered():
    from rewardloop.rewards.base import build_reward
    assert build_reward("color_match").name == "color_match"


def test_the_reward_takes_the_domain_from_its_neutral_module_not_from_the_models_wing():
    from import_graph import graph

    imported = graph()["rewardloop.rewards.color_match"]
    assert "rewardloop.shape_domain" in imported
    assert not [m for m in imported if m.startswith("rewardloop.models")], imported

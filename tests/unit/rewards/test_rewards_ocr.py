import pytest

from ocr_cases import assert_reads_as_expected, cases
from rewardloop.rewards import build_reward
from rewardloop.rewards.ocr import extract_target, ocr_score


@pytest.fixture(scope="module")
def reward():
    return build_reward("ocr")


def test_target_is_first_quoted_span():
    assert extract_target('a sign that says "Open Late" and "Closed"') == "Open Late"
    assert extract_target("a mug reading “Good Morning”") == "Good Morning"
    assert extract_target('first “curly” then "straight"') == "curly"
    assert extract_target('empty "" then "text"') == "text"
    assert extract_target("no quotes here") is None


def test_score_rule_substring_and_levenshtein():
    assert ocr_score("WELCOME to the Cafe", "the cafe") == 1.0  # substring, case and spaces ignored
    assert ocr_score("cafe", "cafe") == 1.0
    assert ocr_score("cafx", "cafe") == pytest.approx(0.75)  # one substitution out of 4
    assert ocr_score("", "cafe") == 0.0
    assert ocr_score("something much longer entirely", "cafe") == 0.0  # distance capped at len


def test_prompt_without_quotes_raises_naming_it(reward):
    prompts = ['a sign saying "hi"', "a cat on a mat"]
    with pytest.raises(ValueError, match=r"prompt 1 .*a cat on a mat"):
        reward.check_prompts(prompts)


def test_rendered_text_scores(reward):
    names, images, prompts, _ = zip(*cases())
    scores, details = reward.score(list(images), list(prompts))
    assert_reads_as_expected(scores, details)
    assert details[0]["ocr_target"] == "hello world"
    assert details[0]["ocr_text"].lower().replace(" ", "") == "helloworld"


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="rewards.ocr.backend"):
        build_reward("ocr", backend="tesseract")

from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from rewardloop.rewards import build_reward
from rewardloop.rewards.ocr import extract_target, ocr_score

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")  # apt: fonts-dejavu-core


def _render(text: str) -> Image.Image:
    image = Image.new("RGB", (320, 96), "white")
    draw = ImageDraw.Draw(image)
    draw.text((16, 24), text, fill="black", font=ImageFont.truetype(str(FONT), 36))
    return image


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
    texts = ["hello world", "OPEN 24 HOURS", "Diffusion"]
    noise = Image.fromarray(
        np.random.default_rng(0).integers(0, 256, (96, 320, 3), dtype=np.uint8)
    )
    images = [_render(t) for t in texts] + [_render("hello world"), noise]
    prompts = [f'a poster that says "{t}"' for t in texts]
    prompts += ['a poster that says "quantum banana"', 'a poster that says "hello world"']
    scores, details = reward.score(images, prompts)
    assert all(s >= 0.9 for s in scores[:3]), details
    assert scores[3] < 0.5, details
    assert scores[4] == pytest.approx(0.0, abs=0.1), details
    assert details[0]["ocr_target"] == "hello world"
    assert details[0]["ocr_text"].lower().replace(" ", "") == "helloworld"


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="rewards.ocr.backend"):
        build_reward("ocr", backend="tesseract")

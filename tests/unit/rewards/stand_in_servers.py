"""Small reward servers of other makes, for tests/unit/rewards/test_remote_reward.py (stdlib only).

  python stand_in_servers.py MODE PORT

Every mode scores ``mean_level``: the mean of an image's RGB values / 255. ``GET /count`` answers
``{"posts": n}``, the scoring requests received so far (the test counts the client's attempts).
- ``flaky:N``: protocol rewardloop/1; the first N scoring requests answer 503, the next ones score;
- ``refuse``: rewardloop/1; every scoring request answers 400;
- ``short``: rewardloop/1; answers 200 with one score too few (a malformed reply);
- ``vanish``: rewardloop/1; the process exits at its first scoring request, before replying (a server
  killed mid-batch);
- ``flow_factory``: Flow-Factory's protocol as its client speaks it (X-GenGroup/Flow-Factory,
  src/flow_factory/rewards/my_reward_remote.py): ``POST /compute`` with ``prompt``, ``image`` (base64
  PNG), ``video``, ``condition_images``, ``condition_videos``, ``kwargs``; reply ``{"rewards": [...]}``;
  ``GET /health`` answers ``{"status": "ok"}``;
- ``geneval``: a GenEval server's stand-in, rewardloop/1 serving reward ``geneval``: reads each image's
  GenEval metadata (``metadata.items``, 400 without it) and scores ``geneval_score`` of it and the image
  (no detector: a checkable rule), with details ``{"tag", "n_include", "mean_level"}``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
from PIL import Image

FLOW_FACTORY_FIELDS = {"prompt", "image", "video", "condition_images", "condition_videos", "kwargs"}
GENEVAL_PASS_TAGS = {"single_object", "colors"}  # the stand-in's "correct" tags
GENEVAL_MIN_LEVEL = 0.02  # and an image not all black


def mean_level(b64: str) -> float:
    image = Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB")
    return float(np.asarray(image, dtype=np.float64).mean() / 255)


def geneval_score(item: dict, level: float) -> float:
    """The stand-in's GenEval score: 1.0 when the metadata's tag is one of GENEVAL_PASS_TAGS and the image's
    mean level is above GENEVAL_MIN_LEVEL, else 0.0 (a real server: whether the detector finds every
    ``include`` and no ``exclude``)."""
    return float(item.get("tag") in GENEVAL_PASS_TAGS and level > GENEVAL_MIN_LEVEL)


class State:
    posts = 0
    lock = threading.Lock()


def handler(mode: str):
    failures = int(mode.split(":")[1]) if mode.startswith("flaky:") else 0

    class Handler(BaseHTTPRequestHandler):
        def reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/count":
                return self.reply(200, {"posts": State.posts})
            if self.path != "/health":
                return self.reply(404, {"detail": "Not Found"})
            if mode == "flow_factory":
                return self.reply(200, {"status": "ok"})
            self.reply(200, {"protocol": "rewardloop/1", "status": "ok",
                             "reward": "geneval" if mode == "geneval" else "mean_level",
                             "options": {}, "fingerprint": {}})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with State.lock:
                State.posts += 1
                posts = State.posts
            if mode == "flow_factory":
                if self.path != "/compute" or set(body) != FLOW_FACTORY_FIELDS:
                    return self.reply(422, {"detail": f"expected POST /compute with {sorted(FLOW_FACTORY_FIELDS)}"})
                return self.reply(200, {"rewards": [mean_level(b) for b in body["image"]]})
            if mode == "geneval":
                items = (body.get("metadata") or {}).get("items")
                if not isinstance(items, list) or len(items) != len(body["images"]):
                    return self.reply(400, {"protocol": "rewardloop/1", "error": {
                        "code": "bad_request", "message": "metadata.items: expected one GenEval object per image"}})
                levels = [mean_level(b) for b in body["images"]]
                return self.reply(200, {"protocol": "rewardloop/1", "reward": "geneval",
                                        "scores": [geneval_score(i, v) for i, v in zip(items, levels)],
                                        "details": [{"tag": i.get("tag"), "n_include": len(i.get("include", [])),
                                                     "mean_level": v} for i, v in zip(items, levels)]})
            if mode == "vanish":
                os._exit(1)  # killed mid-batch: the connection drops, nothing answers on the port again
            if mode == "refuse":
                return self.reply(400, {"protocol": "rewardloop/1",
                                        "error": {"code": "bad_request", "message": "refused on purpose"}})
            if posts <= failures:
                return self.reply(503, {"protocol": "rewardloop/1",
                                        "error": {"code": "warming_up", "message": f"warming up ({posts})"}})
            scores = [mean_level(b) for b in body["images"]]
            if mode == "short":
                scores = scores[:-1]
            self.reply(200, {"protocol": "rewardloop/1", "reward": "mean_level", "scores": scores,
                             "details": [{} for _ in scores]})

        def log_message(self, *args):  # quiet
            pass

    return Handler


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    ThreadingHTTPServer(("127.0.0.1", port), handler(mode)).serve_forever()

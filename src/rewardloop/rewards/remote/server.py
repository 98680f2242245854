"""The HTTP app that serves one registered reward (``rewardloop serve-reward``), built on FastAPI.

``GET /health`` says what is served: the reward, its options, the fingerprint of each checkpoint it
reads (``rewardloop.fingerprint``, as the workflow identifies a local reward's weights) and the limits.
``POST /score`` scores a ``rewardloop/1`` request (``wire``) through one ``MicroBatcher``. With a
token, every route answers 401 without ``Authorization: Bearer <token>``. Nothing a client sends is
unpickled or evaluated: it is JSON, and images are decoded by PIL as PNG or JPEG only.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Mapping

# At module level: FastAPI resolves the handlers' annotations (``request: Request``) in this namespace.
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from rewardloop.rewards.remote.batching import MicroBatcher
from rewardloop.rewards.remote.token import authorized
from rewardloop.rewards.remote.wire import (
    HEALTH_PATH,
    PROTOCOL,
    SCORE_PATH,
    Limits,
    RequestError,
    dumps,
    error_body,
    parse_score_request,
    request_too_large,
    score_reply,
)

log = logging.getLogger("rewardloop.serve_reward")


def checkpoint_fingerprints(name: str, options: Mapping) -> dict[str, str]:
    """``{option: fingerprint}`` of the local files reward ``name`` reads (its ``PATH_OPTIONS``)."""
    from rewardloop.fingerprint import fingerprint, is_local
    from rewardloop.rewards.base import path_options

    return {option: fingerprint(options[option]) for option in path_options(name)
            if options.get(option) and is_local(options[option])}


class RewardService:
    """One built reward, its health record and its batcher."""

    def __init__(self, name: str, options: Mapping, batch_size: int, limits: Limits = Limits()):
        from rewardloop import __version__
        from rewardloop.rewards.base import build_reward

        self.name, self.options, self.limits = name, dict(options), limits
        self.reward = build_reward(name, **self.options)
        self.identity = {"reward": name, "options": self.options,
                         "fingerprint": checkpoint_fingerprints(name, self.options)}
        self.version = __version__
        self.batcher = MicroBatcher(self._score, batch_size)

    def health(self) -> dict:
        return {"protocol": PROTOCOL, "status": "ok", **self.identity, "batch_size": self.batcher.batch_size,
                "limits": self.limits.as_dict(), "rewardloop": self.version,
                "served": {"batches": self.batcher.batches, "images": self.batcher.images}}

    def check_prompts(self, prompts: list[str]) -> None:
        try:
            self.reward.check_prompts(prompts)
        except ValueError as exc:
            raise RequestError(400, "bad_prompt", f"prompts: {exc}") from None

    def _score(self, images: list, prompts: list) -> tuple[list[float], list[dict]]:
        scores, details = self.reward.score(images, prompts)
        scores = [float(s) for s in scores]
        bad = next((k for k, s in enumerate(scores) if not math.isfinite(s)), None)
        if bad is not None:
            raise RuntimeError(f"non-finite score {scores[bad]} for image {bad} of the batch")
        return scores, list(details)


def create_app(service: RewardService, token: str | None = None):
    """The FastAPI app of ``service``; ``token``: the bearer token every request must carry, or None."""
    # No docs or OpenAPI routes: the server exposes what it serves and nothing else.
    app = FastAPI(title=f"rewardloop reward server ({service.name})", docs_url=None, redoc_url=None,
                  openapi_url=None)

    def reply(status: int, body: dict) -> Response:
        return Response(dumps(body), status_code=status, media_type="application/json")

    @app.middleware("http")
    async def require_token(request: Request, call_next):
        if token is not None and not authorized(request.headers.get("authorization"), token):
            return reply(401, error_body("unauthorized", "missing or wrong bearer token "
                                                         "(expected the header Authorization: Bearer <token>)"))
        return await call_next(request)

    @app.get(HEALTH_PATH)
    async def health():
        return reply(200, service.health())

    @app.post(SCORE_PATH)
    async def score(request: Request):
        try:
            body = await _read_body(request, service.limits)
            images, prompts, metadata = await run_in_threadpool(parse_score_request, body, service.limits)
            service.check_prompts(prompts)
        except RequestError as exc:
            return reply(exc.status, error_body(exc.code, exc.message))
        try:
            scores, details = await asyncio.wrap_future(service.batcher.submit(images, prompts))
            return reply(200, score_reply(service.name, scores, details))
        except Exception as exc:  # the reward failed: a server error, which the client may retry
            batch = metadata.get("batch", "?") if isinstance(metadata, dict) else "?"
            log.error("reward %s failed on request batch %s (%d images): %s: %s",
                      service.name, batch, len(images), type(exc).__name__, exc)
            return reply(500, error_body("reward_failed", f"reward {service.name!r} failed on {len(images)} "
                                                          f"images: {type(exc).__name__}: {exc}"))

    return app


async def _read_body(request, limits: Limits) -> bytes:
    """The body, refused as soon as it exceeds ``limits.max_request_bytes`` (before reading it all)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_request_bytes:
        raise request_too_large(int(declared), limits)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.max_request_bytes:
            raise request_too_large(size, limits)
        chunks.append(chunk)
    return b"".join(chunks)

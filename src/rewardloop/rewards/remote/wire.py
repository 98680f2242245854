"""The ``rewardloop/1`` protocol: what a client sends to ``POST /score`` and what the server replies.

Request (JSON)::

    {"protocol": "rewardloop/1",
     "images": ["<base64 PNG or JPEG>", ...],
     "prompts": ["a red circle on a blue background", ...],      one per image
     "metadata": {"batch": "...",                                optional, any JSON object (logged, not scored)
                  "items": [{...}, ...]}}                         optional, one JSON object per image

Reply 200::

    {"protocol": "rewardloop/1", "reward": "color_match",
     "scores": [1.93, ...], "details": [{"purity": 0.97, ...}, ...]}

``metadata.items`` (an addition to ``rewardloop/1`` that keeps its name: a server that does not read it
ignores it, as it ignores the rest of ``metadata``; a request without it is as before) is each image's prompt metadata, in image order:
GenEval's ``evaluation_metadata.jsonl`` object (``tag``, ``include``, ``exclude``, ``prompt``) for a
GenEval server. A client sends it only when the prompts have metadata (``rewardloop benchmark`` with a
``geneval`` set); without it there is no ``items`` key. A server given it checks its shape (a list of
one JSON object per image; 400 otherwise); ``serve-reward``'s registered rewards do not read it.

Any other status carries ``{"protocol": "rewardloop/1", "error": {"code": ..., "message": ...}}``; the
message names the field (``images[3]``, ``prompts``) and what was expected. A request is bounded by
``Limits``: its bytes, its image count and each image's sides, checked on the image header before
any pixel is decoded (a decompression bomb is refused unread).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

PROTOCOL = "rewardloop/1"
SCORE_PATH = "/score"
HEALTH_PATH = "/health"
REQUEST_FIELDS = ("protocol", "images", "prompts", "metadata")
ITEMS = "items"  # metadata.items: one JSON object per image (each prompt's metadata), optional
MAGIC = {b"\x89PNG\r\n\x1a\n": "PNG", b"\xff\xd8\xff": "JPEG"}


@dataclass(frozen=True)
class Limits:
    """What one request may hold; larger requests are answered 413 naming the limit."""

    max_request_bytes: int = 64 << 20
    max_images: int = 256
    max_image_side: int = 4096

    def as_dict(self) -> dict:
        return asdict(self)


class RequestError(ValueError):
    """A request the server refuses: ``status`` (4xx), a short ``code`` and a message naming the field."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_body(code: str, message: str) -> dict:
    return {"protocol": PROTOCOL, "error": {"code": code, "message": message}}


def encode_image(image, format: str = "PNG") -> str:
    """A PIL image as base64 PNG (lossless, so the server scores exactly the pixels the client has), or
    ``format="JPEG"`` at quality 95 (smaller; what UnifiedReward's own vLLM client sends)."""
    buffer = io.BytesIO()
    if format == "JPEG":
        image.convert("RGB").save(buffer, format="JPEG", quality=95)
    else:
        image.save(buffer, format=format)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_image(text, where: str, limits: Limits):
    """An RGB PIL image from base64 PNG/JPEG ``text``; ``RequestError`` naming ``where`` otherwise."""
    from PIL import Image

    if not isinstance(text, str):
        raise RequestError(400, "bad_image", f"{where}: expected a base64 string, got {type(text).__name__}")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(400, "bad_image", f"{where}: not valid base64") from None
    if not any(data.startswith(magic) for magic in MAGIC):
        raise RequestError(400, "bad_image", f"{where}: not a PNG or JPEG image (expected one of "
                                             f"{', '.join(MAGIC.values())})")
    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
    except Exception as exc:
        raise RequestError(400, "bad_image", f"{where}: does not decode ({exc})") from None
    width, height = image.size
    if max(width, height) > limits.max_image_side:
        raise RequestError(413, "image_too_large", f"{where}: {width}x{height} pixels; this server takes sides "
                                                   f"up to {limits.max_image_side} (--max-image-side)")
    try:
        image.load()
    except Exception as exc:
        raise RequestError(400, "bad_image", f"{where}: does not decode ({exc})") from None
    return image.convert("RGB")


def parse_score_request(body: bytes, limits: Limits) -> tuple[list, list[str], dict]:
    """``(images, prompts, metadata)`` of a ``POST /score`` body; ``RequestError`` naming what is wrong."""
    if len(body) > limits.max_request_bytes:
        raise request_too_large(len(body), limits)
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(400, "bad_json", f"request body is not JSON ({exc})") from None
    if not isinstance(request, dict):
        raise RequestError(400, "bad_request", f"request body: expected a JSON object, got {type(request).__name__}")
    unknown = sorted(set(request) - set(REQUEST_FIELDS))
    if unknown:
        raise RequestError(400, "bad_request", f"unknown field(s) {', '.join(unknown)} "
                                               f"(expected {', '.join(REQUEST_FIELDS)})")
    if request.get("protocol") != PROTOCOL:
        raise RequestError(400, "bad_protocol", f"protocol: expected {PROTOCOL!r}, got {request.get('protocol')!r}")
    images, prompts = request.get("images"), request.get("prompts")
    if not isinstance(images, list) or not images:
        raise RequestError(400, "bad_request", "images: expected a non-empty list of base64 PNG/JPEG strings")
    if len(images) > limits.max_images:
        raise RequestError(413, "too_many_images", f"images: {len(images)} images; this server takes up to "
                                                   f"{limits.max_images} per request (--max-images)")
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise RequestError(400, "bad_request", "prompts: expected a list of strings, one per image")
    if len(prompts) != len(images):
        raise RequestError(400, "bad_request", f"prompts: {len(prompts)} prompts for {len(images)} images "
                                               "(expected one per image)")
    metadata = request.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise RequestError(400, "bad_request", f"metadata: expected a JSON object, got {type(metadata).__name__}")
    items = metadata.get(ITEMS)
    if items is not None and (not isinstance(items, list) or len(items) != len(images)
                              or not all(isinstance(item, dict) for item in items)):
        got = f"{len(items)} items" if isinstance(items, list) else type(items).__name__
        raise RequestError(400, "bad_request", f"metadata.{ITEMS}: expected a list of {len(images)} JSON objects "
                                               f"(one per image), got {got}")
    decoded = [decode_image(text, f"images[{k}]", limits) for k, text in enumerate(images)]
    return decoded, prompts, metadata


def request_too_large(size: int, limits: Limits) -> RequestError:
    return RequestError(413, "request_too_large", f"request body: {size} bytes or more; this server takes up to "
                                                  f"{limits.max_request_bytes} (--max-request-mb)")


def score_reply(reward: str, scores: Sequence[float], details: Sequence[dict]) -> dict:
    return {"protocol": PROTOCOL, "reward": reward, "scores": [float(s) for s in scores], "details": list(details)}


def _jsonable(obj):
    # numpy scalars and arrays in reward details, as rewards.combine writes them
    return obj.tolist() if hasattr(obj, "tolist") else str(obj)


def dumps(obj: Any) -> bytes:
    """Strict JSON (no NaN/Infinity: the other side may not read them)."""
    return json.dumps(obj, default=_jsonable, allow_nan=False, separators=(",", ":")).encode()


def parse_score_reply(reply: Any, expected: int, reward: str | None) -> tuple[list[float], list[dict]]:
    """The scores and details of a 200 reply; ``ValueError`` naming the field when it is malformed."""
    if not isinstance(reply, dict):
        raise ValueError(f"reply: expected a JSON object, got {type(reply).__name__}")
    if reply.get("protocol") != PROTOCOL:
        raise ValueError(f"reply.protocol: expected {PROTOCOL!r}, got {reply.get('protocol')!r}")
    if reward is not None and reply.get("reward") != reward:
        raise ValueError(f"reply.reward: expected {reward!r}, got {reply.get('reward')!r}")
    scores, details = reply.get("scores"), reply.get("details")
    scores = check_scores(scores, expected, "reply.scores")
    if not isinstance(details, list) or len(details) != expected or not all(isinstance(d, dict) for d in details):
        raise ValueError(f"reply.details: expected a list of {expected} JSON objects")
    return scores, details


def check_scores(scores: Any, expected: int, where: str) -> list[float]:
    """``scores`` as floats when it is a list of ``expected`` finite numbers; ``ValueError`` naming ``where``."""
    if not isinstance(scores, list) or len(scores) != expected:
        got = f"{len(scores)} items" if isinstance(scores, list) else type(scores).__name__
        raise ValueError(f"{where}: expected a list of {expected} numbers, got {got}")
    for k, value in enumerate(scores):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{where}[{k}]: expected a finite number, got {value!r}")
    return [float(value) for value in scores]

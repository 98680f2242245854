"""What each supported protocol sends and reads: ours (``rewardloop/1``) and Flow-Factory's.

Flow-Factory (X-GenGroup/Flow-Factory, ``src/flow_factory/rewards/my_reward_remote.py``): its client
posts ``{"prompt": [...], "image": [base64 PNG, ...], "video": null, "condition_images": null,
"condition_videos": null, "kwargs": null}`` to ``POST /compute`` and reads ``{"rewards": [...]}``
(a truthy ``"error"`` is a failure); ``GET /health`` answers 200. We send exactly what its client
sends, so a server written for Flow-Factory works unchanged. Its client sends a reward's other inputs
(the sample fields beyond prompt and media) in ``kwargs``, field name to one value per sample; so
per-image metadata (GenEval's) goes as ``"kwargs": {"metadata": [{...}, ...]}``, and ``kwargs`` stays
null without it. Its health says nothing about the
reward or weights, so such a server's identity is its URL and health reply.

flow_grpo's reward-server exchanges pickles; unpickling a server's reply runs whatever code it
names, so that protocol is not supported.
"""

from __future__ import annotations

from typing import Any, Sequence

from rewardloop.rewards.remote.wire import HEALTH_PATH, ITEMS, PROTOCOL, SCORE_PATH, check_scores, encode_image, \
    parse_score_reply


class RewardloopProtocol:
    name = "rewardloop"
    health_path, score_path = HEALTH_PATH, SCORE_PATH

    @staticmethod
    def payload(images: Sequence, prompts: Sequence[str], batch: str, metadata: Sequence[dict] | None = None) -> dict:
        """``metadata``: one JSON object per image, sent as ``metadata.items`` (wire: none without it)."""
        request_metadata = {"batch": batch}
        if metadata is not None:
            request_metadata[ITEMS] = list(metadata)
        return {"protocol": PROTOCOL, "images": [encode_image(image) for image in images],
                "prompts": list(prompts), "metadata": request_metadata}

    @staticmethod
    def parse(reply: Any, expected: int, reward: str | None) -> tuple[list[float], list[dict]]:
        return parse_score_reply(reply, expected, reward)

    @staticmethod
    def identity(health: Any, url: str) -> dict:
        """What the server serves: reward, options, checkpoint fingerprints (``ValueError`` if it does not say)."""
        if not isinstance(health, dict) or health.get("protocol") != PROTOCOL:
            got = health.get("protocol") if isinstance(health, dict) else type(health).__name__
            raise ValueError(f"health reply: expected protocol {PROTOCOL!r}, got {got!r} "
                             "(is this a rewardloop serve-reward server?)")
        missing = [key for key in ("reward", "options", "fingerprint") if key not in health]
        if missing:
            raise ValueError(f"health reply: missing {', '.join(missing)}")
        return {key: health[key] for key in ("reward", "options", "fingerprint")}


class FlowFactoryProtocol:
    name = "flow_factory"
    health_path, score_path = "/health", "/compute"

    @staticmethod
    def payload(images: Sequence, prompts: Sequence[str], batch: str, metadata: Sequence[dict] | None = None) -> dict:
        return {"prompt": list(prompts), "image": [encode_image(image) for image in images], "video": None,
                "condition_images": None, "condition_videos": None,
                "kwargs": None if metadata is None else {"metadata": list(metadata)}}

    @staticmethod
    def parse(reply: Any, expected: int, reward: str | None) -> tuple[list[float], list[dict]]:
        if not isinstance(reply, dict):
            raise ValueError(f"reply: expected a JSON object, got {type(reply).__name__}")
        if reply.get("error"):
            raise ValueError(f"reply.error: {reply['error']}")
        return check_scores(reply.get("rewards"), expected, "reply.rewards"), [{} for _ in range(expected)]

    @staticmethod
    def identity(health: Any, url: str) -> dict:
        return {"protocol": "flow_factory", "url": url, "health": health}


PROTOCOLS = {protocol.name: protocol for protocol in (RewardloopProtocol, FlowFactoryProtocol)}

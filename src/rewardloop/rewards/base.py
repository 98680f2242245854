"""The reward contract and registry.

A reward is built once per job by its factory (``build_reward(name, **options)``) and then scores
batches: ``score(images, prompts) -> (scores, details)`` where ``scores`` is a float array with
one value per image and ``details`` a list of JSON-serialisable dicts (possibly empty dicts).
``check_prompts(prompts)`` raises ``ValueError`` naming the offending prompt when a reward cannot
score a prompt (e.g. OCR without a quoted target). It is a staticmethod, so the config check calls
it on the class before any job starts and before any model is loaded.

Adding a reward = one module with a factory decorated by ``@register("name")`` plus its import in
``rewards/__init__.py``.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np


class Reward(Protocol):
    name: str

    @staticmethod
    def check_prompts(prompts: Sequence[str]) -> None: ...

    def score(self, images: Sequence, prompts: Sequence[str]) -> tuple[np.ndarray, list[dict]]: ...


_FACTORIES: dict[str, Callable[..., Reward]] = {}


def register(name: str):
    """Class or factory decorator: ``@register("jpeg_compressibility")``."""

    def decorate(factory):
        if name in _FACTORIES:
            raise ValueError(f"reward {name!r} is registered twice")
        _FACTORIES[name] = factory
        return factory

    return decorate


def available_rewards() -> list[str]:
    return sorted(_FACTORIES)


def build_reward(name: str, **options) -> Reward:
    if name not in _FACTORIES:
        raise ValueError(
            f"unknown reward {name!r} in 'rewards': expected one of {', '.join(available_rewards())}"
        )
    return _FACTORIES[name](**options)


def check_prompts(rewards_cfg, prompts: Sequence[str]) -> None:
    """Run every configured reward's prompt check without building (loading) the reward."""
    for name in rewards_cfg:
        if name not in _FACTORIES:
            build_reward(name)  # raises the unknown-reward error
        check = getattr(_FACTORIES[name], "check_prompts", None)
        if check is not None:
            check(prompts)

"""The reward contract and registry.

A reward is built once per job by its factory (``build_reward(name, **options)``) and then scores
batches: ``score(images, prompts) -> (scores, details)`` where ``scores`` is a float array with
one value per image and ``details`` a list of JSON-serialisable dicts (possibly empty dicts).
``check_prompts(prompts)`` raises ``ValueError`` naming the offending prompt when a reward cannot
score a prompt (e.g. OCR without a quoted target). It is a staticmethod, so the config check calls
it on the class before any job starts and before any model is loaded. So does ``check_options``:
option names against the factory's signature, and the local files a reward declares in
``PATH_OPTIONS`` (``{option: (kind, required)}``) exist, so a missing checkpoint stops the run
before any job instead of failing the score job.

An entry with ``remote:`` (``{weight: 1, remote: {url: ...}}``, any name) is a reward scored by a
server (``rewards/remote``): ``build_reward`` builds its client, the checks here validate only its
spec, and its prompts are the server's to check.

Adding a reward = one module with a factory decorated by ``@register("name")`` plus its import in
``rewards/__init__.py``.
"""

from __future__ import annotations

import inspect
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from rewardloop.rewards.remote.spec import is_remote, parse_remote


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
    if "remote" in options:  # scored by a server (docs/rewards.md, "Remote rewards"); any name
        from rewardloop.rewards.remote.client import build_remote_reward

        return build_remote_reward(name, options)
    if name not in _FACTORIES:
        raise ValueError(
            f"unknown reward {name!r} in 'rewards': expected one of {', '.join(available_rewards())}"
        )
    return _FACTORIES[name](**options)


def check_prompts(rewards_cfg, prompts: Sequence[str]) -> None:
    """Run every configured reward's prompt check without building (loading) the reward."""
    for name, value in rewards_cfg.items():
        if is_remote(value):  # its server checks the prompts
            continue
        if name not in _FACTORIES:
            build_reward(name)  # raises the unknown-reward error
        check = getattr(_FACTORIES[name], "check_prompts", None)
        if check is not None:
            check(prompts)


def _option_names(factory) -> set[str] | None:
    """The keyword options a reward factory takes; None when it takes any (``**options``)."""
    parameters = inspect.signature(factory).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def path_options(name: str) -> dict[str, tuple[str, bool]]:
    """``{option: (kind "file" | "dir", required)}``: the local files reward ``name`` reads."""
    return dict(getattr(_FACTORIES.get(name), "PATH_OPTIONS", {}))  # none for a remote entry's own name


def check_options(rewards_cfg, key: str = "rewards") -> None:
    """Known reward names and option names, and the declared local files present; nothing is loaded."""
    from rewardloop.rewards.clip_common import require_path

    for name, value in rewards_cfg.items():
        if is_remote(value):  # only its spec here; the server is asked by remote.client.check_remote_rewards
            parse_remote(name, value, key=key)
            continue
        if name not in _FACTORIES:
            build_reward(name)  # raises the unknown-reward error
        factory = _FACTORIES[name]
        options = {k: v for k, v in value.items() if k != "weight"} if isinstance(value, Mapping) else {}
        accepted = _option_names(factory)
        unknown = sorted(set(options) - accepted) if accepted is not None else []
        if unknown:
            raise ValueError(f"'{key}.{name}': unknown option(s) {', '.join(unknown)} "
                             f"(expected {', '.join(sorted(accepted))})")
        for option, (kind, required) in path_options(name).items():
            if required or options.get(option) is not None:
                require_path(name, option, options.get(option), kind=kind)

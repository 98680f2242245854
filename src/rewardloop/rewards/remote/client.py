"""The reward a ``remote:`` entry builds: scores each batch by one request to its server.

``rewards.base.build_reward`` builds it for an entry with ``remote:`` (``spec``), so the score stage,
eval, rescoring and ``rewardloop score`` use it like any reward. Before its first batch it asks the
server's health what it serves and refuses another reward than the configured one. Its identity for
reruns (``remote_identities``) is what the health endpoint reports: reward, options, checkpoint
fingerprints (rewardloop protocol), so a server now serving other weights reruns scoring, and a
restarted server with the same weights reruns nothing.

A reward configured by its own options that also asks a server (``vlm_judge``: an OpenAI-compatible
chat endpoint) registers how to ask it in ``SERVER_IDENTITIES``; its identity joins the remote ones
here, so the same startup check and reruns cover it.
"""

from __future__ import annotations

import functools
import json
from typing import Callable, Mapping, Sequence

import numpy as np

from rewardloop.rewards.remote.protocols import PROTOCOLS
from rewardloop.rewards.remote.spec import RemoteSpec, is_remote, parse_remote
from rewardloop.rewards.remote.token import read_token
from rewardloop.rewards.remote.transport import Endpoint, PermanentError, RemoteRewardError


# {registered reward name: options -> identity}: filled by those rewards' modules as rewards/__init__ imports
# them, which happens before this module runs (it is inside the rewards package); this module does not import
# rewards.base, which imports it.
SERVER_IDENTITIES: dict[str, Callable[[Mapping], dict]] = {}


class RemoteReward:
    """``score(images, prompts)`` by ``POST`` to the server of ``spec`` (one request per batch); with
    ``metadata`` (one JSON object per image: its prompt's, e.g. GenEval's) the request carries it."""

    takes_metadata = True  # rewards.combine.RewardSet passes each batch's metadata

    def __init__(self, name: str, spec: RemoteSpec, key: str = "rewards"):
        self.name, self.spec = name, spec
        self.protocol = PROTOCOLS[spec.protocol]
        token = read_token(spec.token_env, spec.token_file, where=f"'{key}.{name}.remote'")
        self.endpoint = Endpoint(spec.url, f"remote reward {name!r} ({spec.protocol} server {spec.url})",
                                 spec.timeout, spec.retries, spec.backoff, token)
        self._requests = 0
        self._checked = False

    @staticmethod
    def check_prompts(prompts: Sequence[str]) -> None:
        """Nothing here: the server checks them (a 400 names the prompt)."""

    def health(self) -> dict:
        return self.endpoint.call("GET", self.protocol.health_path, what=" (health)")

    def served(self) -> dict:
        """What the server says it serves; ``RemoteRewardError`` if it is not the configured reward."""
        try:
            identity = self.protocol.identity(self.health(), self.spec.url)
        except ValueError as exc:
            raise PermanentError(f"{self.endpoint.label}: {exc}") from None
        if self.spec.reward is not None and identity.get("reward") != self.spec.reward:
            raise PermanentError(f"{self.endpoint.label} serves reward {identity.get('reward')!r} "
                                 f"(options {identity.get('options')}), expected {self.spec.reward!r} "
                                 "(remote.reward, by default the entry's name)")
        self._checked = True
        return identity

    def score(self, images: Sequence, prompts: Sequence[str],
              metadata: Sequence[dict] | None = None) -> tuple[np.ndarray, list[dict]]:
        images, prompts = list(images), list(prompts)
        if len(images) != len(prompts):
            raise ValueError(f"got {len(images)} images but {len(prompts)} prompts")
        if metadata is not None and len(metadata) != len(images):
            raise ValueError(f"got {len(images)} images but {len(metadata)} metadata objects")
        if not images:
            return np.zeros(0), []
        if not self._checked:
            self.served()
        self._requests += 1
        batch = f"request {self._requests} of this job: {len(images)} images, first prompt {prompts[0]!r}"
        reply = self.endpoint.call("POST", self.protocol.score_path,
                                   self.protocol.payload(images, prompts, batch, metadata), what=f" ({batch})")
        try:
            scores, details = self.protocol.parse(reply, len(images), self.spec.reward)
        except ValueError as exc:
            raise PermanentError(f"{self.endpoint.label}: malformed reply to {batch}: {exc} "
                                 "(permanent: not retried)") from None
        return np.asarray(scores, dtype=np.float64), details


def build_remote_reward(name: str, options: Mapping, key: str = "rewards") -> RemoteReward:
    """What ``rewards.base.build_reward`` returns for an entry with ``remote:`` (``options`` without weight)."""
    return RemoteReward(name, parse_remote(name, options, key=key), key=key)


@functools.lru_cache(maxsize=None)
def _served(name: str, spec: RemoteSpec, key: str) -> str:
    """The canonical JSON of what the server of ``spec`` serves (once per process: every job's params ask)."""
    identity = RemoteReward(name, spec, key=key).served()
    return json.dumps(identity, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=None)
def _asked(name: str, options: str) -> str:
    """The canonical JSON of ``SERVER_IDENTITIES[name]`` for these options (JSON), once per process."""
    return json.dumps(SERVER_IDENTITIES[name](json.loads(options)), sort_keys=True, separators=(",", ":"))


def remote_identities(rewards_cfg: Mapping, key: str = "rewards") -> dict[str, str]:
    """``{"<key>.<name>.remote": identity}`` of the remote entries of a rewards section (asks each server),
    and ``{"<key>.<name>.server": identity}`` of its entries in ``SERVER_IDENTITIES``.

    For ``config.input_identities``: in a job's params, the identity makes a server that now serves
    other weights rerun the jobs that scored with it. ``ValueError`` names the entry, the URL and the
    cause when a server is unreachable or serves another reward, so it also stops a run at startup.
    """
    found = {}
    for name, value in (rewards_cfg or {}).items():
        if not is_remote(value):
            if name in SERVER_IDENTITIES and isinstance(value, Mapping):
                options = {k: v for k, v in value.items() if k != "weight"}
                try:
                    found[f"{key}.{name}.server"] = _asked(name, json.dumps(options, sort_keys=True))
                except (RemoteRewardError, ValueError) as exc:
                    raise ValueError(f"'{key}.{name}': {exc}") from None
            continue
        spec = parse_remote(name, value, key=key)
        try:
            found[f"{key}.{name}.remote"] = _served(name, spec, key)
        except RemoteRewardError as exc:
            expected = f"a server serving {spec.reward!r}" if spec.reward else f"a {spec.protocol} reward server"
            raise ValueError(f"'{key}.{name}.remote': {exc}; expected {expected} at {spec.url}") from None
    return found


def check_remote_rewards(sections: Mapping[str, Mapping]) -> None:
    """The startup check: every remote entry of ``{config key: rewards section}`` answers its health as
    configured (``ValueError`` naming the entry, the URL and what was expected otherwise)."""
    for key, rewards_cfg in sections.items():
        remote_identities(rewards_cfg, key=key)

"""The ``remote:`` mapping of a reward entry: a reward scored by a server instead of in the job::

    rewards:
      ocr:
        weight: 1
        remote:
          url: http://127.0.0.1:8765     # the server's base URL (http or https)
          protocol: rewardloop           # or flow_factory (Flow-Factory's POST /compute)
          reward: ocr                    # rewardloop only: the reward the server must serve (default: the entry's name)
          timeout: 120                   # seconds to wait for one reply
          retries: 3                     # further attempts after a transient failure (5xx, connection reset)
          backoff: 1.0                   # seconds before the first retry, doubled each time
          token_env: OCR_SERVER_TOKEN    # the environment variable holding the bearer token (or token_file)

The entry takes no other options: they are the server's (``serve-reward --option``). The token
itself is never in the config (it lands in params, provenance and MLflow): only where to read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from numbers import Real
from typing import Mapping
from urllib.parse import urlsplit

PROTOCOL_NAMES = ("rewardloop", "flow_factory")
SPEC_KEYS = ("url", "protocol", "reward", "timeout", "retries", "backoff", "token_env", "token_file")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class RemoteSpec:
    url: str
    protocol: str = "rewardloop"
    reward: str | None = None  # what the server must serve (rewardloop protocol); None: not checked
    timeout: float = 120.0
    retries: int = 3
    backoff: float = 1.0
    token_env: str | None = None
    token_file: str | None = None


def is_remote(value) -> bool:
    """Whether a ``rewards`` entry's value is a remote reward (a mapping with ``remote``)."""
    return isinstance(value, Mapping) and "remote" in value


def parse_remote(name: str, value: Mapping, key: str = "rewards") -> RemoteSpec:
    """The validated spec of entry ``name`` of config section ``key``; ``ValueError`` naming the field."""
    where = f"'{key}.{name}"
    extra = sorted(set(value) - {"weight", "remote"})
    if extra:
        raise ValueError(f"{where}': a remote reward takes only weight and remote, got {', '.join(extra)} "
                         "(the reward's options are the server's: serve-reward --option)")
    remote = value["remote"]
    if not isinstance(remote, Mapping):
        raise ValueError(f"{where}.remote': expected a mapping with url (and protocol, ...), got {remote!r}")
    unknown = sorted(set(remote) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"{where}.remote': unknown key(s) {', '.join(unknown)} (expected {', '.join(SPEC_KEYS)})")
    if remote.get("url") is None:
        raise ValueError(f"{where}.remote.url': missing (expected the server's base URL, e.g. http://127.0.0.1:8765)")
    spec = RemoteSpec(**{k: v for k, v in remote.items() if v is not None})
    check_url(spec.url, f"{where}.remote.url'")
    if spec.protocol not in PROTOCOL_NAMES:
        raise ValueError(f"{where}.remote.protocol': expected one of {', '.join(PROTOCOL_NAMES)}, "
                         f"got {spec.protocol!r} (flow_grpo's pickle protocol is not supported: docs/rewards.md)")
    if spec.protocol == "flow_factory" and spec.reward is not None:
        raise ValueError(f"{where}.remote.reward': a flow_factory server does not say which reward it serves; "
                         "leave reward out")
    if spec.protocol == "rewardloop" and spec.reward is None:
        spec = replace(spec, reward=name)
    if not isinstance(spec.reward, (str, type(None))) or spec.reward == "":
        raise ValueError(f"{where}.remote.reward': expected a reward name, got {spec.reward!r}")
    check_connection(f"{where}.remote", spec.timeout, spec.retries, spec.backoff, spec.token_env, spec.token_file)
    return spec


def check_connection(where: str, timeout, retries, backoff, token_env, token_file) -> None:
    """A client's timeout, retries, backoff and token source (a remote entry's, vlm_judge's); ``ValueError``
    naming the key under ``where`` (``'rewards.ocr.remote``)."""
    _check_number(timeout, f"{where}.timeout'", positive=True)
    _check_number(backoff, f"{where}.backoff'", positive=False)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"{where}.retries': expected an integer >= 0, got {retries!r}")
    if token_env is not None and token_file is not None:
        raise ValueError(f"{where}': give token_env or token_file, not both")
    if token_env is not None and not (isinstance(token_env, str) and ENV_NAME.fullmatch(token_env)):
        raise ValueError(f"{where}.token_env': expected the NAME of an environment variable (letters, digits, _), "
                         "never the token itself (the value is not repeated here: it may be the token)")
    if token_file is not None and not isinstance(token_file, str):
        raise ValueError(f"{where}.token_file': expected a path, got a {type(token_file).__name__}")


def check_url(url, where: str) -> None:
    if not isinstance(url, str):
        raise ValueError(f"{where}: expected an http(s) URL, got {url!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{where}: expected an http:// or https:// URL with a host, got {url!r}")
    if parts.username or parts.password:
        raise ValueError(f"{where}: credentials in the URL would land in the run's params and provenance; "
                         "give a bearer token with token_env or token_file")
    if parts.query or parts.fragment:
        raise ValueError(f"{where}: expected the server's base URL, without ?query or #fragment, got {url!r}")


def _check_number(value, where: str, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or value < 0 or (positive and value == 0):
        raise ValueError(f"{where}: expected a number {'> 0' if positive else '>= 0'}, got {value!r}")

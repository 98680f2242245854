"""HTTP to one reward server: timeouts, retries with backoff for transient failures, none for permanent ones.

Transient (retried ``retries`` times, waiting ``backoff``, ``2 * backoff``, ... seconds): a refused or
reset connection, no reply within the timeout, a reply cut short, HTTP 5xx, 408 and 429. Permanent
(raised at once): any other 4xx, a redirect, and a malformed reply. Each error names the server,
the request and the cause, and says whether it was retried.

The bearer token goes only to the configured URL: redirects are not followed, and the session
ignores the environment's proxies and ``.netrc`` (``trust_env = False``), so nothing else sees the
token or adds credentials of its own. No error message holds the token.
"""

from __future__ import annotations

import time
from typing import Any

import requests

from rewardloop.rewards.remote.wire import dumps

TRANSIENT_STATUS = (408, 429)
CONNECT_TIMEOUT_S = 10.0
REPLY_EXCERPT = 300  # characters of a non-JSON error reply quoted in the error


class RemoteRewardError(RuntimeError):
    """A remote reward request that failed; ``TransientError`` after the retries, else ``PermanentError``."""


class TransientError(RemoteRewardError):
    pass


class PermanentError(RemoteRewardError):
    pass


class _Retry(Exception):
    """One attempt failed in a way another attempt may not."""


class Endpoint:
    """A server's base URL with its session, token, timeout and retry policy; ``label`` starts every error."""

    def __init__(self, base_url: str, label: str, timeout: float, retries: int, backoff: float,
                 token: str | None = None):
        self.base_url, self.label = base_url.rstrip("/"), label
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.session = requests.Session()
        self.session.trust_env = False
        self.session.headers["Content-Type"] = "application/json"
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, payload: Any = None, what: str = "") -> Any:
        """The JSON reply of ``method path``; ``what`` names the request in errors (e.g. the batch)."""
        url = self.base_url + path
        body = None if payload is None else dumps(payload)
        attempts = 1 + self.retries
        for attempt in range(attempts):
            try:
                return self._once(method, url, body, what)
            except _Retry as exc:
                cause = str(exc)
                if attempt + 1 < attempts:
                    time.sleep(self.backoff * 2 ** attempt)
        raise TransientError(f"{self.label}: {method} {url}{what}: {cause} (transient; gave up after "
                             f"{attempts} attempt(s))")

    def _once(self, method: str, url: str, body: bytes | None, what: str) -> Any:
        try:
            response = self.session.request(method, url, data=body, allow_redirects=False,
                                            timeout=(min(CONNECT_TIMEOUT_S, self.timeout), self.timeout))
        except requests.Timeout:
            raise _Retry(f"no reply within {self.timeout:g} s (remote.timeout)") from None
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
            raise _Retry(f"connection failed ({_reason(exc)})") from None
        except requests.RequestException as exc:
            raise PermanentError(f"{self.label}: {method} {url}{what}: {type(exc).__name__}: {exc} "
                                 "(permanent: not retried)") from None
        status = response.status_code
        if status >= 500 or status in TRANSIENT_STATUS:
            raise _Retry(f"HTTP {status}: {_server_message(response)}")
        if 300 <= status < 400:
            raise PermanentError(f"{self.label}: {method} {url}{what}: HTTP {status} redirect to "
                                 f"{response.headers.get('location')!r}, not followed (the token goes only to the "
                                 "configured URL; configure the final URL) (permanent: not retried)")
        if status >= 400:
            raise PermanentError(f"{self.label}: {method} {url}{what}: HTTP {status}: {_server_message(response)} "
                                 "(permanent: not retried)")
        try:
            return response.json()
        except ValueError:
            raise PermanentError(f"{self.label}: {method} {url}{what}: malformed reply: not JSON "
                                 f"({_excerpt(response.text)!r}) (permanent: not retried)") from None


def _server_message(response) -> str:
    """The error a server explains: ours (``error.message``), FastAPI's ``detail``, or the reply's start."""
    try:
        body = response.json()
    except ValueError:
        return _excerpt(response.text) or response.reason or "no body"
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        for key in ("error", "detail"):
            if body.get(key):
                return _excerpt(str(body[key]))
    return _excerpt(str(body))


def _excerpt(text: str) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= REPLY_EXCERPT else text[:REPLY_EXCERPT] + "..."


def _reason(exc: Exception) -> str:
    """The innermost cause of a requests/urllib3 connection error (``ConnectionRefusedError: ...``)."""
    inner = exc
    while inner.__cause__ is not None or inner.__context__ is not None:
        inner = inner.__cause__ or inner.__context__
    reason = getattr(inner, "reason", None) or inner
    return f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason

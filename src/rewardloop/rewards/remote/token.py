"""The optional bearer token of a reward server, from an environment variable or a file.

Never from the config: the config lands in job params, Parquet provenance and MLflow, so it names
where the token is (``token_env``, ``token_file``), never the token. Nothing here prints a token;
errors name the variable or the file.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path


def read_token(token_env: str | None = None, token_file: str | os.PathLike | None = None,
               where: str = "token") -> str | None:
    """The token from ``token_env`` (a variable's name) or ``token_file``; None when neither is given."""
    if token_env and token_file:
        raise ValueError(f"{where}: give the token's environment variable or its file, not both")
    if token_env:
        value = os.environ.get(token_env)
        if value is None:
            raise ValueError(f"{where}: environment variable {token_env} is not set")
        return _checked(value.strip(), f"environment variable {token_env}")
    if token_file:
        path = Path(token_file)
        if not path.is_file():
            raise ValueError(f"{where}: token file {path} does not exist")
        return _checked(path.read_text(encoding="utf-8").strip(), f"token file {path}")
    return None


def _checked(token: str, source: str) -> str:
    if not token:
        raise ValueError(f"{source} is empty (expected a bearer token)")
    if not token.isprintable() or " " in token:
        raise ValueError(f"{source}: a bearer token is one word of printable characters")
    return token


def authorized(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <token>`` (compared in constant time)."""
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())

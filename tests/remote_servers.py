"""Reward servers for tests, each a subprocess on a free 127.0.0.1 port: `rewardloop serve-reward`
(rewardloop.cli.serve_reward) and the stand-ins of other makes in unit/rewards/stand_in_servers.py."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

STAND_INS = Path(__file__).parent / "unit" / "rewards" / "stand_in_servers.py"
SERVER_START_S = 120  # importing the rewards on a loaded 2-core machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running(command: list[str], log: Path, env=None, port: int | None = None):
    """``(url, log)`` of a server started by ``command`` (its port appended: ``port``, else a free one), up
    once it answers HTTP."""
    port = port or free_port()
    with open(log, "w") as out:
        process = subprocess.Popen([*command, str(port)], stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}: {log.read_text()}")
            try:
                requests.get(url + "/health", timeout=2)
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server not up after {SERVER_START_S} s: {log.read_text()}") from None
                time.sleep(0.2)
        yield url, log
    finally:
        process.terminate()
        process.wait(timeout=30)


def serve_reward(*args: str) -> list[str]:
    return [sys.executable, "-m", "rewardloop.cli", "serve-reward", *args, "--port"]


def stand_in(mode: str) -> list[str]:
    return [sys.executable, str(STAND_INS), mode]


def stand_ins_module():
    """stand_in_servers.py as a module (its scoring rules, to compute what a stand-in answers)."""
    spec = importlib.util.spec_from_file_location("stand_in_servers", STAND_INS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""Rewards served over HTTP: ``rewardloop serve-reward`` (the server) and remote reward entries (the client).

- ``wire``: our protocol ``rewardloop/1`` (JSON, base64 PNG/JPEG images), its limits and errors,
  shared by the server and the client;
- ``server`` and ``batching``: the FastAPI app that serves one registered reward, batching requests up
  to the reward's batch size; ``rewardloop.cli.serve_reward`` starts it under uvicorn;
- ``spec``: the ``remote:`` mapping of a reward entry, validated;
- ``transport``: HTTP with timeouts and retries (transient errors retried with backoff, permanent ones not);
- ``protocols``: what each protocol sends and reads (ours, Flow-Factory's ``POST /compute``);
- ``client``: the reward a ``remote:`` entry builds, its identity for reruns and the startup check;
- ``token``: the optional bearer token, read from an environment variable or a file, never the config.

This package's ``__init__`` imports nothing, so ``rewards.base`` can import the client lazily without
pulling in the server (which imports ``rewards.base``).
"""

"""rewardloop serve-reward: serve one registered reward over HTTP (protocol rewardloop/1).

  rewardloop serve-reward --reward ocr --option backend=paddleocr --option det_model_dir=/models/det \\
      --port 8765 --token-file ~/.reward-token

GET /health says which reward, options and checkpoint fingerprints it serves; POST /score scores a
JSON batch of base64 PNG/JPEG images and their prompts (docs/rewards.md, "Remote rewards").
Requests are batched up to --batch-size images per reward call. The server binds 127.0.0.1 unless
--host says otherwise; with --token-file or --token-env, every request must carry
`Authorization: Bearer <token>` (the token is never printed). --option KEY=VALUE (repeatable) gives
the reward's options, VALUE parsed as YAML, as under `rewards:` in a config. Run it from any
environment that has rewardloop and the reward's dependencies (e.g. paddleocr in its own venv).
"""  # plain text: it is also `rewardloop serve-reward --help`

from __future__ import annotations

import argparse
import sys


def parse_options(option_args) -> dict:
    """``{key: value}`` from ``--option KEY=VALUE`` values (VALUE parsed as YAML)."""
    import yaml

    options = {}
    for spec in option_args or ():
        key, sep, raw = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--option {spec!r}: expected KEY=VALUE")
        if key in options:
            raise ValueError(f"--option {key!r} given twice")
        if key in ("weight", "remote"):
            raise ValueError(f"--option {key!r}: not an option of the reward (a served reward has no weight)")
        options[key] = yaml.safe_load(raw) if raw != "" else ""
    return options


def build_service(args):
    from rewardloop.rewards.base import check_options
    from rewardloop.rewards.remote.server import RewardService
    from rewardloop.rewards.remote.wire import Limits

    options = parse_options(args.option)
    check_options({args.reward: {"weight": 1, **options}}, key="--reward")
    if args.max_request_mb <= 0 or args.max_images < 1 or args.max_image_side < 1:
        raise ValueError("--max-request-mb, --max-images and --max-image-side must be positive")
    limits = Limits(max_request_bytes=int(args.max_request_mb * (1 << 20)), max_images=args.max_images,
                    max_image_side=args.max_image_side)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    return RewardService(args.reward, options, args.batch_size, limits)


def run(args) -> None:
    import uvicorn

    from rewardloop.rewards.remote.server import create_app
    from rewardloop.rewards.remote.token import read_token

    token = read_token(args.token_env, args.token_file, where="--token-env/--token-file")
    service = build_service(args)
    access = f"bearer token required ({'file ' + args.token_file if args.token_file else '$' + args.token_env})" \
        if token else "no token: anyone who can reach this address can score"
    print(f"serving reward {args.reward} (options {service.options}, fingerprint {service.identity['fingerprint']}) "
          f"at http://{args.host}:{args.port}, batch size {args.batch_size}; {access}", file=sys.stderr, flush=True)
    uvicorn.run(create_app(service, token), host=args.host, port=args.port, log_level=args.log_level,
                workers=1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reward", required=True, metavar="NAME", help="the registered reward to serve")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of the reward, VALUE parsed as YAML (repeatable)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=8765, help="port to listen on")
    parser.add_argument("--batch-size", type=int, default=16, help="images per reward call, at most")
    parser.add_argument("--token-file", metavar="FILE", help="file holding the bearer token clients must send")
    parser.add_argument("--token-env", metavar="VAR", help="environment variable holding the bearer token")
    parser.add_argument("--max-request-mb", type=float, default=64.0, help="largest request body, in MiB")
    parser.add_argument("--max-images", type=int, default=256, help="most images in one request")
    parser.add_argument("--max-image-side", type=int, default=4096, help="longest image side, in pixels")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                        help="uvicorn's log level")


def add_parser(subparsers) -> None:
    """Register the ``serve-reward`` subcommand on an ``argparse`` subparsers object."""
    serve = subparsers.add_parser("serve-reward", help="serve a registered reward over HTTP",
                                  description=__doc__)
    add_arguments(serve)
    serve.set_defaults(func=run)

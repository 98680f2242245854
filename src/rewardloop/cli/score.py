"""rewardloop score: score a folder of images or a samples.parquet with configured rewards.

  rewardloop score --reward pickscore --reward-option pickscore.model_path=/models/PickScore_v1 \\
      --reward color_match=0.5 --images samples.parquet --out scores.parquet

--reward NAME[=WEIGHT] (repeatable, weight 1 by default) and --reward-option NAME.KEY=VALUE
(repeatable; VALUE is parsed as YAML, so 3, 0.5, true are typed) build the same `rewards` mapping
as the workflow config. --images is a folder (its .png/.jpg/.jpeg files, sorted by name; --prompts
gives one prompt per line in that order, empty prompts without it) or a samples.parquet (columns
sample_id, prompt, image). The output table has the columns sample_id (Parquet input only), file,
prompt, reward (weighted sum), reward_<name> per reward and reward_details (JSON), one row per
image, written atomically.
"""  # plain text: it is also `rewardloop score --help`

from __future__ import annotations

import sys
from pathlib import Path

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def parse_rewards(reward_args, option_args) -> dict:
    """The ``rewards`` config mapping from ``--reward`` and ``--reward-option`` values."""
    import yaml

    from rewardloop.rewards import available_rewards

    rewards: dict[str, dict] = {}
    for spec in reward_args or ():
        name, sep, weight = spec.partition("=")
        name = name.strip()
        if not name:
            raise ValueError(f"--reward {spec!r}: expected NAME or NAME=WEIGHT")
        try:
            value = float(weight) if sep else 1.0
        except ValueError:
            raise ValueError(f"--reward {spec!r}: weight {weight!r} is not a number") from None
        if name in rewards:
            raise ValueError(f"--reward {name!r} given twice")
        rewards[name] = {"weight": value}
    if not rewards:
        raise ValueError(f"give at least one --reward (available: {', '.join(available_rewards())})")
    for spec in option_args or ():
        key, sep, raw = spec.partition("=")
        name, dot, option = key.partition(".")
        if not sep or not dot or not name or not option:
            raise ValueError(f"--reward-option {spec!r}: expected NAME.KEY=VALUE")
        if name not in rewards:
            raise ValueError(f"--reward-option {spec!r}: reward {name!r} is not among the --reward ones")
        if option == "weight":
            raise ValueError(f"--reward-option {spec!r}: give the weight as --reward {name}=WEIGHT")
        rewards[name][option] = yaml.safe_load(raw) if raw != "" else ""
    return rewards


def _read_prompts(path: Path) -> list[str]:
    from rewardloop.prompts import require_file

    require_file(path, f"--prompts {path}")
    return path.read_text(encoding="utf-8").splitlines()


def load_inputs(images_arg: str, prompts_arg: str | None):
    """``(columns, images, prompts)``: the id columns of the output table, decoded RGB images."""
    from tqdm import tqdm

    from rewardloop.artifacts import decode_image, read_table

    source = Path(images_arg)
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise ValueError(f"--images {source}: no .png/.jpg/.jpeg files in this folder")
        if prompts_arg is not None:
            prompts = _read_prompts(Path(prompts_arg))
            if len(prompts) != len(files):
                raise ValueError(
                    f"--prompts {prompts_arg} has {len(prompts)} prompt line(s) but --images {source} "
                    f"has {len(files)} image file(s); give one prompt per image, in file-name order"
                )
        else:
            prompts = [""] * len(files)
        images = [
            decode_image({"bytes": path.read_bytes()}, str(path))
            for path in tqdm(files, desc="images", unit="img", file=sys.stderr)
        ]
        return {"file": [p.name for p in files]}, images, prompts
    if source.is_file():
        if prompts_arg is not None:
            raise ValueError("--prompts is for image folders; a samples.parquet carries its prompts")
        table = read_table(source, required=("sample_id", "prompt", "image"), vouched=False).to_pydict()
        images = [
            decode_image(cell or {"bytes": b""}, f"{source}: sample {sid!r}")
            for sid, cell in tqdm(
                list(zip(table["sample_id"], table["image"])), desc="images", unit="img", file=sys.stderr
            )
        ]
        files = [(cell or {}).get("path") for cell in table["image"]]
        return {"sample_id": table["sample_id"], "file": files}, images, list(table["prompt"])
    raise ValueError(f"--images {source}: no such folder or file")


def run(args) -> None:
    import pandas as pd

    from rewardloop.artifacts import write_table
    from rewardloop.rewards.combine import RewardSet

    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    rewards_cfg = parse_rewards(args.reward, args.reward_option)
    reward_set = RewardSet(rewards_cfg)  # before decoding: option errors surface at once
    columns, images, prompts = load_inputs(args.images, args.prompts)
    reward_set.check_prompts(prompts)
    scores = reward_set.score(images, prompts, batch_size=args.batch_size)
    table = pd.concat([pd.DataFrame({**columns, "prompt": prompts}), scores], axis=1)
    write_table(table, args.out, meta={"command": "score", "images": str(args.images), "rewards": rewards_cfg})
    print(
        f"scored {len(table)} image(s) with {', '.join(reward_set.names)}: "
        f"mean reward {table['reward'].mean():.4g} -> {args.out}"
    )


def add_parser(subparsers) -> None:
    """Register the ``score`` subcommand on an ``argparse`` subparsers object."""
    score = subparsers.add_parser("score", help="score a folder of images or a samples.parquet with rewards",
                                  description=__doc__)
    score.add_argument("--reward", action="append", required=True, metavar="NAME[=WEIGHT]",
                       help="a reward to apply, weight 1 by default (repeatable)")
    score.add_argument("--reward-option", action="append", default=[], metavar="NAME.KEY=VALUE",
                       help="an option of a reward, VALUE parsed as YAML (repeatable)")
    score.add_argument("--images", required=True, metavar="DIR|samples.parquet",
                       help="folder of .png/.jpg/.jpeg files (sorted by name) or a samples.parquet")
    score.add_argument("--prompts", metavar="FILE",
                       help="one prompt per line, in the images' file-name order (folders only)")
    score.add_argument("--out", required=True, metavar="scores.parquet", help="output table")
    score.add_argument("--batch-size", type=int, default=8, help="images per reward call")
    score.set_defaults(func=run)

"""rewardloop rescore: score every archived rollout and eval image of finished runs with gold rewards.

  rewardloop rescore --reward jpeg_compressibility --reward ocr results/

For every run folder under RESULTS (a single run's results/, or each results/<experiment>/seed_<s>/ of
a fan-out), every iter_XXX/ and base/ with an eval.parquet gets rescore/<name>.parquet and <name>.json
per --reward, the same files as the workflow's rule rescore with `gold_rewards` in the config; nothing
is regenerated. Files already there are kept (--force rescores them). When the run was tracked
(tracking/run.json), gold/<name>/mean is logged to its MLflow parent and iteration runs at step =
iteration (the base model at -1).
"""  # plain text: it is also `rewardloop rescore --help`

from __future__ import annotations

import json
from pathlib import Path

from rewardloop import results_layout as layout
from rewardloop.cli.score import parse_rewards


def run_folders(results: Path) -> list[Path]:
    """The run folders at or under ``results``: those holding iter_XXX/ folders with an eval.parquet (a
    fan-out's shared results/base/ belongs to no run: each run holds its own copy)."""
    if not results.is_dir():
        raise ValueError(f"{results}: not a folder")
    found = layout.run_roots(results)
    if not found:
        raise ValueError(f"{results}: no {layout.iteration_name('XXX')}/ folder with an {layout.EVAL_TABLE} at or below it")
    return found


def rescore_run(folder: Path, rewards: dict, batch_size: int, force: bool) -> list[Path]:
    from rewardloop.monitors.history import folders
    from rewardloop.stages import rescore

    written = []
    for iteration, sub in folders(folder):
        tables = {"rollout": sub / layout.SAMPLES, "eval": sub / layout.EVAL_TABLE}
        tables = {source: str(path) for source, path in tables.items() if path.is_file()}
        if "eval" not in tables:
            continue
        for name, spec in rewards.items():
            out = sub / layout.rescore_name(name, "parquet")
            if out.is_file() and not force:
                print(f"{out}: kept (--force rescores it)")
                continue
            cfg = {"gold": {name: spec}, "score": {"batch_size": batch_size}}
            metrics = rescore.run(cfg, tables, iteration, out, out.with_suffix(".json"))
            print(f"{out}: gold/{name}/mean {metrics[f'gold/{name}/mean']:.4f}")
            written.append(out.with_suffix(".json"))
    return written


def log_to_mlflow(folder: Path, written: list[Path]) -> None:
    import contextlib

    from rewardloop import tracking

    run_json = Path(layout.RunLayout(folder).tracking_run).resolve()
    if not written or not run_json.is_file() or json.loads(run_json.read_text()).get("status") != "ok":
        return
    by_iteration: dict[int, list[str]] = {}
    for path in written:
        by_iteration.setdefault(layout.folder_iteration(path.parent.parent.name), []).append(str(path.resolve()))
    with contextlib.chdir(workflow_directory(folder, json.loads(run_json.read_text())["tracking_uri"])):
        for iteration, paths in sorted(by_iteration.items()):
            tracking.log_gold(run_json, iteration, paths)


def workflow_directory(folder: Path, uri: str) -> Path:
    """Where the workflow ran: the default store's URI, ``sqlite:///results/mlflow.db``, is relative to
    it (the folder above a single run's results/, or above a fan-out's results/<experiment>/seed_<s>/)."""
    database = uri.removeprefix("sqlite:///")
    if not uri.startswith("sqlite:///") or Path(database).is_absolute():
        return Path.cwd()
    for candidate in [folder.resolve(), *folder.resolve().parents]:
        if (candidate / database).is_file():
            return candidate
    raise ValueError(f"{folder}: its MLflow store {uri} is relative to the workflow's folder, and no folder "
                     f"above {folder} holds {database}")


def add_parser(commands) -> None:
    import argparse

    cmd = commands.add_parser("rescore", help="score archived rollouts and eval images with gold rewards",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("results", nargs="?", default="results", help="a results folder (default: %(default)s)")
    cmd.add_argument("--reward", action="append", required=True, metavar="NAME[=WEIGHT]",
                     help="a gold reward (repeatable; the weight is not used)")
    cmd.add_argument("--reward-option", action="append", metavar="NAME.KEY=VALUE",
                     help="an option of a --reward (repeatable; VALUE parsed as YAML)")
    cmd.add_argument("--batch-size", type=int, default=16, help="images per reward call (default: %(default)s)")
    cmd.add_argument("--force", action="store_true", help="rescore files already there (default: off)")
    cmd.set_defaults(func=_main)


def _main(args) -> None:
    from rewardloop.rewards.base import check_options

    rewards = parse_rewards(args.reward, args.reward_option)
    check_options(rewards, key="--reward")
    for folder in run_folders(Path(args.results)):
        log_to_mlflow(folder, rescore_run(folder, rewards, args.batch_size, args.force))

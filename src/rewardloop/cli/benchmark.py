"""rewardloop benchmark: the field's benchmark prompt sets, run on the base model and chosen checkpoints.

  rewardloop benchmark results/ --benchmark drawbench=prompts/DrawBench.csv:drawbench \\
      --metric pickscore --reward-option pickscore.model_path=/models/PickScore_v1 \\
      --metric clip_score --checkpoints base,last,best,every:5

Each --benchmark NAME=FILE:FORMAT is a prompt set (formats: drawbench, pickapic, ocr, text, geneval; see
docs/benchmarks.md), each --metric a registered reward (or a remote one, via --reward-option
NAME.remote={url: ...}; a geneval set's metric is a GenEval server, which receives each image's
prompt metadata). --checkpoints picks the models: base, last (the last iteration with a
checkpoint), best (`rewardloop best`'s choice, eval/reward/mean), every:K (iterations K-1, 2K-1, ...:
the model after every K iterations) and iteration numbers. Images are sampled as the run's eval
samples them (its model, resolution, scheduler, precision, eval steps and guidance; DDIM, eta 0), with
the same seeds for every checkpoint, from the run's validated config (results/report/config.yaml).

Per checkpoint and benchmark, <folder>/benchmark/<NAME>.parquet holds each image's scores (written
atomically). A file already there with the same settings and prompts is kept, not regenerated; one
with other settings is refused (--force regenerates it). The table: `rewardloop summary --benchmarks`,
and in the Snakemake report once `snakemake` has run rule benchmark_table (report/benchmarks.csv);
when the run was tracked (tracking/run.json), also in its MLflow parent run: benchmark/<NAME>/<metric>
(the mean, with .../ci95 and .../n) at step = the model's iteration (the base model at -1), and the
table as artifact benchmark/benchmarks.csv.
"""  # plain text: it is also `rewardloop benchmark --help`

from __future__ import annotations

from pathlib import Path

from rewardloop import results_layout as layout


def run_config(results: Path) -> dict:
    import yaml

    path = Path(layout.RunLayout(results).report(layout.RUN_CONFIG))
    if not path.is_file():
        raise ValueError(f"{path}: not found; rewardloop benchmark samples with the run's validated config, "
                         f"which the workflow writes there (rule report_config)")
    return yaml.safe_load(path.read_text())


def parse_benchmarks(specs) -> dict[str, tuple[Path, str]]:
    """{name: (prompt file, format)} from ``--benchmark NAME=FILE:FORMAT`` values."""
    from rewardloop.benchmark_sets import FORMATS

    found = {}
    for spec in specs or ():
        name, sep, rest = spec.partition("=")
        path, colon, fmt = rest.rpartition(":")
        if not sep or not colon or not name or not path:
            raise ValueError(f"--benchmark {spec!r}: expected NAME=FILE:FORMAT (FORMAT one of {', '.join(FORMATS)})")
        if fmt not in FORMATS:
            raise ValueError(f"--benchmark {spec!r}: format {fmt!r} is not one of {', '.join(FORMATS)}")
        layout.benchmark_name(name)  # a name that can be a file's stem
        if name in found:
            raise ValueError(f"--benchmark {name!r} given twice")
        found[name] = (Path(path), fmt)
    if not found:
        raise ValueError("give at least one --benchmark NAME=FILE:FORMAT")
    return found


def parse_metrics(names, options) -> dict:
    """The metrics' rewards mapping; an unknown name is refused with the registered rewards."""
    from rewardloop.rewards import available_rewards
    from rewardloop.rewards.base import check_options
    from rewardloop.rewards.remote.spec import is_remote
    from rewardloop.cli.score import parse_rewards

    metrics = parse_rewards(names, options)
    for name, spec in metrics.items():
        if name not in available_rewards() and not is_remote(spec):
            raise ValueError(f"--metric {name!r}: not a registered reward; expected one of "
                             f"{', '.join(available_rewards())} (or a remote one: --reward-option {name}.remote=...)")
    check_options(metrics, key="--metric")
    return metrics


def select_checkpoints(results: Path, spec: str) -> dict[str, int]:
    """{folder name: iteration (-1 for base)} of ``--checkpoints`` (base, last, best, every:K, numbers),
    base first, then the iterations in order."""
    run = layout.RunLayout(results)
    exported = [it for it, folder in run.iteration_folders() if (folder / layout.CHECKPOINT_DIR).is_dir()]
    have = f"iterations with a {layout.CHECKPOINT_DIR}/: {', '.join(map(str, exported)) or 'none'}"
    chosen: set[int] = set()
    for item in (part.strip() for part in spec.split(",")):
        if item == layout.BASE:
            chosen.add(layout.BASE_ITERATION)
        elif item in ("last", "best") or item.startswith("every:"):
            if not exported:
                raise ValueError(f"--checkpoints {item}: {results} has no iteration with a {layout.CHECKPOINT_DIR}/")
            if item == "last":
                chosen.add(max(exported))
            elif item == "best":
                from rewardloop.reports.best import choose

                chosen.add(choose(results)["iteration"])
            else:
                every = item.removeprefix("every:")
                if not every.isdigit() or int(every) < 1:
                    raise ValueError(f"--checkpoints {item}: expected every:K with K a whole number >= 1")
                chosen.update(it for it in exported if (it + 1) % int(every) == 0)
        elif item.isdigit():
            folder = Path(run.iteration(int(item))) / layout.CHECKPOINT_DIR
            if int(item) not in exported:
                raise ValueError(f"--checkpoints {item}: no {folder} ({have})")
            chosen.add(int(item))
        else:
            raise ValueError(f"--checkpoints {item!r}: expected base, last, best, every:K or an iteration number")
    return {layout.folder_name(it): it for it in sorted(chosen)}


def prompts_digest(prompts) -> str:
    from rewardloop.artifacts import config_hash

    return config_hash(prompts.to_dict(orient="list"))


def is_finished(out: Path, expected_settings: dict, digest: str, force: bool) -> bool:
    """Whether ``out`` is a finished table of these settings and prompts (kept); a table of others is
    refused unless ``force``. A partial write never has the final name (artifacts.write_table)."""
    from rewardloop.artifacts import config_hash, read_provenance

    if not out.is_file() or force:
        return False
    meta = read_provenance(out)
    if meta.get("config_hash") == config_hash(expected_settings) and meta.get("prompts_digest") == digest:
        return True
    raise ValueError(f"{out}: written with other settings or prompts (metrics, images per prompt, seed, the "
                     f"run's sampler, or the prompt file changed); --force regenerates it")


def run_benchmarks(results, benchmarks, metrics, checkpoints: str = "base,last", images_per_prompt: int = 1,
                   seed: int = 0, batch_size: int | None = None, score_batch_size: int = 16, device: str | None = None,
                   threads: int = 1, force: bool = False, progress: bool = True) -> list[Path]:
    """Run every benchmark on every chosen checkpoint; the tables written (those kept are not listed)."""
    from rewardloop import benchmark_sets
    from rewardloop.rewards.base import check_prompts
    from rewardloop.stages import benchmark

    results = Path(results)
    if not results.is_dir():
        raise ValueError(f"{results}: not a folder")
    if images_per_prompt < 1:
        raise ValueError(f"--images-per-prompt {images_per_prompt}: expected 1 or more")
    cfg = run_config(results)
    models = select_checkpoints(results, checkpoints)
    sets = {name: benchmark_sets.load(path, fmt) for name, (path, fmt) in benchmarks.items()}
    for name, prompts in sets.items():  # a metric that cannot score a set's prompts (ocr without quotes)
        try:
            check_prompts(metrics, prompts.prompt.tolist())
        except ValueError as exc:
            raise ValueError(f"--benchmark {name} ({benchmarks[name][0]}): {exc}") from exc
    expected = benchmark.settings(cfg, metrics, images_per_prompt, seed)
    run, written = layout.RunLayout(results), []
    reward_set = None  # the metrics' models, loaded at the first table to write and kept for the others
    for folder, iteration in models.items():
        lora_dir = None if iteration == layout.BASE_ITERATION else f"{run.iteration(iteration)}/{layout.CHECKPOINT_DIR}"
        pipe = None  # this checkpoint's model (the last one's freed), loaded once for its prompt sets if one is to be written
        for name, prompts in sets.items():
            out = Path(run.folder(folder)) / layout.benchmark_name(name)
            digest = prompts_digest(prompts)
            if is_finished(out, expected, digest, force):
                print(f"{out}: kept (finished with these settings)", flush=True)
                continue
            if pipe is None:
                pipe = benchmark.load_model(cfg, lora_dir, device=device or cfg["device"], threads=threads)
            if reward_set is None:
                from rewardloop.rewards.combine import RewardSet

                reward_set = RewardSet(metrics)
            benchmark.run(cfg, pipe, prompts, None if iteration == layout.BASE_ITERATION else iteration, lora_dir, out,
                          metrics, images_per_prompt, seed, digest,
                          batch_size=batch_size or cfg["generate"]["batch_size"], score_batch_size=score_batch_size,
                          progress=progress, desc=f"{name} on {folder}", reward_set=reward_set)
            print(f"{out}: written ({len(prompts) * images_per_prompt} images)", flush=True)
            written.append(out)
    return written


def add_parser(commands) -> None:
    import argparse

    cmd = commands.add_parser("benchmark", help="run benchmark prompt sets on the base and chosen checkpoints",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("results", nargs="?", default="results", help="a run's results folder (default: %(default)s)")
    cmd.add_argument("--benchmark", action="append", required=True, metavar="NAME=FILE:FORMAT",
                     help="a prompt set (repeatable); FORMAT: drawbench, pickapic, ocr, text or geneval")
    cmd.add_argument("--metric", action="append", required=True, metavar="NAME",
                     help="a registered reward scored on every image (repeatable)")
    cmd.add_argument("--reward-option", action="append", metavar="NAME.KEY=VALUE",
                     help="an option of a --metric (repeatable; VALUE parsed as YAML)")
    cmd.add_argument("--checkpoints", default="base,last",
                     help="comma-separated: base, last, best, every:K, iteration numbers (default: %(default)s)")
    cmd.add_argument("--images-per-prompt", type=int, default=1, help="images per prompt (default: %(default)s)")
    cmd.add_argument("--seed", type=int, default=0, help="seed of the images' noise (default: %(default)s)")
    cmd.add_argument("--batch-size", type=int, default=None, help="images per sampling batch (default: the run's "
                                                                    "generate.batch_size)")
    cmd.add_argument("--score-batch-size", type=int, default=16, help="images per reward call (default: %(default)s)")
    cmd.add_argument("--device", default=None, help="torch device (default: the run's config device)")
    cmd.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    cmd.add_argument("--force", action="store_true", help="regenerate tables already there (default: off)")
    cmd.set_defaults(func=_main)


def log_to_mlflow(results) -> int | None:
    """The table into the run's MLflow parent run when the run was tracked; the values logged, or None."""
    import contextlib
    import json
    import tempfile

    from rewardloop import tracking
    from rewardloop.reports.benchmark_table import columns, rows
    from rewardloop.cli.rescore import workflow_directory
    from rewardloop.reports.text_tables import csv_text

    run_json = Path(layout.RunLayout(results).tracking_run).resolve()
    if not run_json.is_file() or json.loads(run_json.read_text()).get("status") != "ok":
        return None
    table, folders = rows(results)
    steps = {folder: layout.folder_iteration(folder) for folder in folders}
    with tempfile.TemporaryDirectory(prefix="rewardloop-benchmark-") as tmp:
        csv_path = Path(tmp) / layout.BENCHMARK_REPORT
        csv_path.write_text(csv_text(table, columns(folders)))
        with contextlib.chdir(workflow_directory(Path(results), json.loads(run_json.read_text())["tracking_uri"])):
            return tracking.log_benchmarks(run_json, table, steps, csv_path)


def _main(args) -> None:
    from rewardloop.reports.benchmark_table import render

    benchmarks = parse_benchmarks(args.benchmark)
    metrics = parse_metrics(args.metric, args.reward_option)
    run_benchmarks(args.results, benchmarks, metrics, args.checkpoints, args.images_per_prompt, args.seed,
                   args.batch_size, args.score_batch_size, args.device, args.threads, args.force)
    print(render(args.results))
    print("the report's copy: `snakemake` (rule benchmark_table writes report/benchmarks.csv), then `make report`")
    logged = log_to_mlflow(args.results)
    if logged is not None:
        print(f"tracking: {logged} benchmark values and benchmark/benchmarks.csv -> the run's MLflow parent run")

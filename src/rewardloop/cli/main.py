"""The `rewardloop` command: tools around the workflow (the workflow itself runs via snakemake)."""

from __future__ import annotations

import argparse
import os
import sys

from rewardloop.host import cpu_kernels

SIGPIPE_STATUS = 141  # 128 + SIGPIPE: how `cat` and `ls` end when the reader of their output went away


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written (plain text); every option's help ends with its default when it has one."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS) \
                and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def _build_tiny(args) -> None:
    from rewardloop.models.tiny import builds as tiny_builds

    if args.check:
        differences = tiny_builds.rebuild_differences(args.out, cpu_kernels.in_effect())
        if differences:
            raise SystemExit(f"rewardloop build-tiny --check: a rebuild of {args.out} gives other bytes:\n  "
                             + "\n  ".join(differences) + f"\nIf the builder's change is meant, refresh the "
                             f"folder with `rewardloop build-tiny --out {args.out}` (make tiny), commit it, and "
                             "update the figures that follow from it (README's table, test_default_run.py).")
        refreshed = tiny_builds.refresh_builder_record(args.out)
        print(f"rewardloop build-tiny --check: a rebuild of {args.out} gives its bytes"
              + ("; its build_info.json now records the current builder (commit it)" if refreshed else ""))
        return
    tiny = {"seed": args.seed, "vae_steps": args.vae_steps, "unet_steps": args.unet_steps,
            "pretrain_on": args.pretrain_on, "threads": args.threads}
    tiny_builds.build(args.out, tiny_builds.recipe_record(args.family, tiny, cpu_kernels.in_effect()))
    print(f"tiny model written to {args.out}")


def _build_replica(args) -> None:
    import json

    from rewardloop.models.replicas import ReplicaError, build_replica

    if args.device != "cpu":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"rewardloop build-replica: --device {args.device}, but torch sees no CUDA device "
                             f"(--device cpu draws the weights on the CPU)")
    try:
        stats = build_replica(args.family, args.out, size=args.size, seed=args.seed, variant=args.variant,
                              device=args.device)
    except ReplicaError as exc:  # an unknown --variant for the family, named with the family's choices
        raise SystemExit(f"rewardloop build-replica: {exc}") from exc
    params = ", ".join(f"{name} {count:,}" for name, count in stats["params"].items())
    print(f"{args.size} replica of {stats['repo']} written to {args.out} "
          f"({stats['bytes']['total'] / 1e6:.1f} MB, {stats['wall_s']:.1f} s); parameters: {params}")
    if args.stats:
        print(json.dumps(stats, indent=2))


def _smoke_overlay(args) -> None:
    from rewardloop.smoke.overlay import write_overlay

    path = write_overlay(args.recipe, args.out, assets=args.assets)
    print(f"overlay written to {path}; run:\n  snakemake --cores 2 --configfile {args.recipe} {path}")


def _inspect(args) -> None:
    from rewardloop.reports.inspect import describe

    for path in args.paths:
        print(describe(path, verbose=args.verbose))


def _objectives(args) -> None:
    from rewardloop.objectives import OBJECTIVES

    for name, objective in sorted(OBJECTIVES.items()):
        print(f"{name}: {objective.description}")
        print(f"  signal: {objective.signal}; families: {', '.join(objective.family_names())}; "
              f"rollouts record steps: {'yes' if objective.records_steps else 'no'}")
        for key, spec in objective.schema()["properties"].items():
            print(f"  train.{name}.{key} (default {spec['default']!r}): {spec['description']}")


def parser() -> argparse.ArgumentParser:
    from rewardloop import __version__
    from rewardloop.models.families import FAMILIES
    from rewardloop.models.replicas import FAMILIES as REPLICAS
    from rewardloop.models.replicas import VARIANTS as REPLICA_VARIANTS

    tiny = [name for name, family in FAMILIES.items() if family.tiny_builder]
    top = argparse.ArgumentParser(prog="rewardloop", description=__doc__, formatter_class=HelpFormatter)
    top.add_argument("--version", action="version", version=f"rewardloop {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    build = commands.add_parser("build-tiny", help=f"build an embedded tiny model ({', '.join(tiny)})")
    build.add_argument("--out", default="resources/models/tiny-sd15", help="output diffusers folder")
    build.add_argument("--seed", type=int, default=0, help="seed of the weights and of the synthetic data")
    random_init = [name for name in tiny if not FAMILIES[name].tiny_pretrained]
    build.add_argument("--family", choices=tiny, default=tiny[0],  # the first registered: the default run's
                       help=f"{', '.join(n for n in tiny if n not in random_init)} are briefly pretrained; "
                            f"{', '.join(random_init)}: tiny random-init models of the architecture (plumbing "
                            "tests; the pretraining options do not apply)")
    build.add_argument("--vae-steps", type=int, default=1200, help="pretraining steps of the VAE")
    build.add_argument("--unet-steps", type=int, default=1200, help="pretraining steps of the denoiser")
    build.add_argument("--pretrain-on", choices=("train", "all"), default="train",
                       help="the captions pretraining sees: the train prompts only, or every combination")
    build.add_argument("--check", action="store_true",
                       help="rebuild the folder at --out from the recipe its build_info.json records, in a "
                            "temporary folder, and compare the weights' bytes (exit 1 when they differ)")
    build.add_argument("--threads", type=int, default=2, help="torch threads (part of the recipe: same seed and "
                       "threads give a bit-identical model)")
    build.add_argument("--cpu-kernels", choices=cpu_kernels.SETTINGS, default="auto",
                       help="auto/avx2: pinned kernels, the same model on every x86-64 CPU with AVX2 (the config's "
                            "cpu_kernels); native: the fastest the CPU has")
    build.set_defaults(func=_build_tiny)

    replica = commands.add_parser(
        "build-replica", help="write a random-weight replica of a published checkpoint's layout and configs "
                              "(sd15: stable-diffusion-v1-5, sdxl: SDXL base 1.0, sd3: SD3.5 Medium, Large or "
                              "Large Turbo, flux: FLUX.1-dev or FLUX.1-schnell)")
    replica.add_argument("--family", choices=list(REPLICAS), required=True,
                         help=f"the published layout: {', '.join(REPLICAS)}")
    variants = "; ".join(f"{family}: {', '.join(names)}" for family, names in REPLICA_VARIANTS.items())
    replica.add_argument("--variant", default=None,
                         help=f"the published checkpoint of the family (default its first): {variants}")
    replica.add_argument("--out", required=True, help="output diffusers folder (replaced atomically)")
    replica.add_argument("--size", choices=["tiny", "full"], default="tiny",
                         help="tiny: published configs with small widths/depths (CPU tests, seconds); full: the "
                              "published dimensions (GPU smoke runs, benchmarks; GBs on disk)")
    replica.add_argument("--seed", type=int, default=0,
                         help="random weights; the same seed on the same device gives identical files")
    replica.add_argument("--device", default="cpu",
                         help="where the random weights are drawn: cpu, or cuda (a full-size replica drawn "
                              "on the GPU that will run it)")
    replica.add_argument("--stats", action="store_true", help="also print the build stats as JSON")
    replica.set_defaults(func=_build_replica)

    smoke = commands.add_parser(
        "smoke-overlay", help="write a --configfile overlay that runs one short iteration of a recipe on a tiny "
                              "replica of its model family and stand-ins of its reward models (no download)")
    smoke.add_argument("--recipe", required=True, help="the recipe, e.g. configs/sd15_pickscore_dpo.yaml")
    smoke.add_argument("--out", required=True, help="folder for overlay.yaml and the recipe's first prompts")
    smoke.add_argument("--assets", default=None, help="folder of the replicas and reward stand-ins, built once and "
                                                      "shared by several overlays (default: OUT/assets)")
    smoke.set_defaults(func=_smoke_overlay)

    inspect = commands.add_parser("inspect", help="summarise artifacts (Parquet, safetensors, JSON, folders)")
    inspect.add_argument("paths", nargs="+", metavar="PATH",
                         help="a .parquet, .safetensors or .json artifact, or a folder (its artifacts, recursively)")
    inspect.add_argument("-v", "--verbose", action="store_true",
                         help="a folder's artifacts in full, as a file is shown (default: one line per artifact)")
    inspect.set_defaults(func=_inspect)

    listing = commands.add_parser("objectives", help="list the training objectives (train.loss) and their options")
    listing.set_defaults(func=_objectives)

    from rewardloop.cli import benchmark, rescore, score, serve_reward
    from rewardloop.reports import best, compare, summary

    score.add_parser(commands)
    rescore.add_parser(commands)
    summary.add_parser(commands)
    compare.add_parser(commands)
    best.add_parser(commands)
    benchmark.add_parser(commands)
    serve_reward.add_parser(commands)
    for command in commands.choices.values():
        command.formatter_class = HelpFormatter
    return top


def _quiet_stdout() -> None:
    """stdout onto /dev/null, so that the interpreter's last flush at exit finds no closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    # Before anything computes: a command on the CPU uses the kernels a workflow run would (config cpu_kernels).
    for line in cpu_kernels.pin(getattr(args, "cpu_kernels", "auto"), str(getattr(args, "device", None) or "cpu")):
        print(line, file=sys.stderr)
    try:
        args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:  # `rewardloop inspect ... | head`: the reader has what it wanted
        _quiet_stdout()
        return SIGPIPE_STATUS
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"rewardloop {args.command}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What ``complete`` fills or tidies beyond the schema's defaults: values that depend on the model family,
one spelling of each path, null rewards dropped, only the chosen objective's section kept."""

from __future__ import annotations

import os


def drop_null_rewards(config: dict) -> None:
    """A reward set to null is removed: recipes merge over config.yaml and drop its color_match so."""
    for section in (config, config.get("eval")):
        if isinstance(section, dict) and isinstance(section.get("rewards"), dict):
            section["rewards"] = {k: v for k, v in section["rewards"].items() if v is not None}


def fill_family_defaults(config: dict) -> None:
    """``generate.resolution: null`` becomes the model family's default size, each of the family's
    ``defaults`` left null its value (e.g. ``train.dpo.beta``), ``generate.precision: auto``
    train.mixed_precision's."""
    from rewardloop.models.families import get_family

    family = get_family(config["model"]["family"])
    if config["generate"]["resolution"] is None:
        config["generate"]["resolution"] = family.default_resolution
    for dotted, value in {**family.defaults, "train.lora.targets": list(family.lora_targets)}.items():
        *parents, key = dotted.split(".")
        section = config
        for name in parents:
            section = section.get(name) if isinstance(section, dict) else None
        if isinstance(section, dict) and section.get(key, value) is None:
            section[key] = value
    config["generate"]["precision"] = sampling_precision(config["generate"], config["train"])


def sampling_precision(generate: dict, train: dict) -> str:
    """generate.precision, ``auto`` (or absent) resolved to the training's mixed precision (fp32 for ``no``)."""
    precision = generate.get("precision", "auto")
    if precision != "auto":
        return precision
    return "fp32" if train["mixed_precision"] == "no" else train["mixed_precision"]


def normalise_paths(config: dict) -> None:
    """Paths as one spelling (``./models/x/`` = ``models/x``): jobs' params compare them as strings, and
    another spelling of the same folder would rerun every job that names it."""
    from rewardloop.rewards.base import path_options

    def normal(section: dict, key: str) -> None:
        if isinstance(section.get(key), str) and section[key]:
            section[key] = os.path.normpath(section[key])

    for section, key in ((config["model"], "path"), (config["model"], "init_lora"), (config["prompts"], "train"),
                         (config["prompts"], "eval"), (config["data"], "offline_pairs")):
        normal(section, key)
    for rewards in (config["rewards"], config["eval"].get("rewards") or {}):
        for name, value in rewards.items():
            if isinstance(value, dict) and name in _reward_names():
                for option in path_options(name):
                    normal(value, option)


def drop_unchosen_objectives(config: dict) -> None:
    """Only the chosen objective's section of ``train`` stays: the others' options would be params of no use."""
    from rewardloop.objectives import OBJECTIVES

    for name in [k for k in config["train"] if k != config["train"]["loss"] and k in OBJECTIVES]:
        del config["train"][name]


def _reward_names() -> set[str]:
    import rewardloop.rewards  # noqa: F401  (registers every reward)
    from rewardloop.rewards.base import available_rewards

    return set(available_rewards())

"""The part of the config each job reads (its ``params``), and the evals ``eval.also_at_guidance`` adds.

Only the workflow (rules/common.smk) and the experiment fan-out project the config so; a job passed
just its sections is not rerun when a key it does not read changes.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from rewardloop import results_layout
from rewardloop.host import input_links

# (section, key) pairs that change how many jobs do a stage's work, never its result.
JOB_SPLIT_KEYS = (("generate", "shards"), ("score", "shards"))


def stage_config(config: Mapping, *sections: str, keep: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """The part of the config one stage uses.

    Rules pass only this to their job (as ``params``), so that changing a key a stage does not use
    (``iterations``, say) never makes Snakemake rerun a finished job. ``keep``: of these sections,
    only these keys (eval reads prompts.eval and a few generate keys, not the rollouts' others).
    Keys that only split the work into jobs (JOB_SPLIT_KEYS) are left out: the artifacts do not depend
    on them, so changing them reruns nothing and leaves the provenance hash as it was.
    """
    selected = {name: copy.deepcopy(config[name]) for name in sections}
    for name, keys in (keep or {}).items():
        selected[name] = {key: selected[name][key] for key in keys}
    for section, key in JOB_SPLIT_KEYS:
        if isinstance(selected.get(section), dict):
            selected[section].pop(key, None)
    inputs = input_identities(config, sections)
    for key, path in local_inputs(config, sections).items():  # read by content, wherever it is (input_links)
        _replace(selected, key, input_links.link_for(results_layout.RunLayout().root, inputs[key], path))
    if inputs:
        selected["inputs"] = inputs
    return selected


def _replace(selected: dict, key: str, value: str) -> None:
    """Set the dotted config ``key`` in ``selected`` where the job's sections hold it (a reward name may
    itself hold no dot: ``rewards.<name>.<option>``, ``eval.rewards.<name>.<option>``)."""
    *parents, leaf = key.split(".")
    node = selected
    for part in parents:
        if not isinstance(node, dict) or part not in node:
            return  # a section the job was not given (eval's own keep), so nothing to replace
        node = node[part]
    if isinstance(node, dict) and leaf in node:
        node[leaf] = value


def local_inputs(config: Mapping, sections) -> dict[str, str]:
    """{config key: path} of the local files outside results/ that these sections make a job read: the
    base model (a hub id: the snapshot folder it resolves to in the hub cache, if cached), model.init_lora,
    the rewards' checkpoints. A model folder a rule builds (model.build_tiny) is not one of them (it is a
    Snakemake input)."""
    from rewardloop.fingerprint import is_local
    from rewardloop.models.loading import cached_snapshot, is_hub_id
    from rewardloop.rewards.base import path_options

    found = {}
    if "model" in sections:
        model = config["model"]
        if not model.get("build_tiny") and is_local(model["path"]):
            found["model.path"] = model["path"]
        elif not model.get("build_tiny") and is_hub_id(model["path"]) and cached_snapshot(model["path"]):
            found["model.path"] = cached_snapshot(model["path"])  # the revision refs/main names now
        if model.get("init_lora") and is_local(model["init_lora"]):
            found["model.init_lora"] = model["init_lora"]
    for key, rewards in _reward_sections(config, sections):
        for name, value in rewards.items():
            for option in path_options(name) if isinstance(value, Mapping) else ():
                if value.get(option) and is_local(value[option]):
                    found[f"{key}.{name}.{option}"] = value[option]
    return found


def _reward_sections(config: Mapping, sections) -> list[tuple[str, Mapping]]:
    found = [("rewards", config.get("rewards") or {})] if "rewards" in sections else []
    if "eval" in sections:
        found.append(("eval.rewards", config["eval"].get("rewards") or {}))
    if "gold_rewards" in sections:
        found.append(("gold_rewards", config["gold_rewards"]))
    return found


def input_identities(config: Mapping, sections) -> dict[str, str]:
    """{config key: fingerprint} of the ``local_inputs`` of these sections, and of the remote rewards what
    their servers report they serve. In a job's params, a changed file reruns the jobs that read it,
    though its path stays the same (rewardloop.fingerprint)."""
    from rewardloop.fingerprint import fingerprint
    from rewardloop.rewards.remote.client import remote_identities

    found = {key: fingerprint(path) for key, path in local_inputs(config, sections).items()}
    for key, rewards in _reward_sections(config, sections):
        found.update(remote_identities(rewards, key=key))
    return found


def eval_guidance_key(config: Mapping) -> str:
    """The key that holds the eval's CFG scale: ``eval.guidance_scale``, or ``generate.guidance_scale`` (the
    rollouts') where that is null. The one place of that fallback."""
    return "generate.guidance_scale" if config["eval"].get("guidance_scale") is None else "eval.guidance_scale"


def eval_guidance_scale(config: Mapping) -> float:
    """The CFG scale the eval samples at (``eval_guidance_key``'s value), from the whole config or from an
    eval job's (``eval_config`` keeps generate.guidance_scale exactly where it is the eval's)."""
    section, key = eval_guidance_key(config).split(".")
    return config[section][key]


def eval_config(config: Mapping, guidance: float | None = None) -> dict[str, Any]:
    """What an eval job reads: the held-out prompts, and of generate only the sampler's guidance, size,
    batch, sampler and precision (not the rollouts' steps, eta, group size or SDE settings). The same
    for the base model's eval and every iteration's, and for every experiment of a fan-out (which
    therefore shares one base eval). ``guidance``: one of ``eval.also_at_guidance``, whose eval is the
    same but for its CFG scale. ``also_at_guidance`` itself is left out, so adding a scale reruns no eval."""
    config = {**config, "eval": {k: v for k, v in config["eval"].items() if k != "also_at_guidance"}}
    if guidance is not None:
        config["eval"]["guidance_scale"] = float(guidance)
    generate = ("resolution", "batch_size", "scheduler", "precision")
    if eval_guidance_key(config) == "generate.guidance_scale":  # else eval's own guidance, not the rollouts'
        generate = ("guidance_scale", *generate)
    return stage_config(config, "model", "prompts", "generate", "eval", "rewards", "score", "device",
                        keep={"prompts": ("eval",), "generate": generate})


def guidance_evals(config: Mapping) -> dict[str, float]:
    """{name: CFG scale} of the further evals of ``eval.also_at_guidance``: ``eval_cfg1`` for 1.0, ``eval_cfg4.5``
    for 4.5 (results_layout.GuidanceEval's names: its files' stem and its metrics' prefix)."""
    return {e.name: e.scale for e in results_layout.guidance_evals(config["eval"].get("also_at_guidance"))}


def export_config(config: Mapping, extra_adapters=()) -> dict[str, Any]:
    """What an export job reads: model, export, and of train only which adapter was trained (and the weight
    sets the objective keeps beside it, ``extra_adapters``)."""
    train: dict[str, Any] = {"adapter": config["train"]["adapter"]}
    if extra_adapters:
        train["extra_adapters"] = list(extra_adapters)
    return {**stage_config(config, "model", "export"), "train": train}


def rescore_config(config: Mapping, gold: str) -> dict[str, Any]:
    """What a rescore job reads: the gold reward ``gold`` (and its checkpoint's fingerprint) and the scoring
    batch size."""
    one = {"gold_rewards": {gold: config["gold_rewards"][gold]}, "score": config["score"]}
    cfg = stage_config(one, "gold_rewards", "score")
    cfg["gold"] = cfg.pop("gold_rewards")
    cfg["score"] = {"batch_size": config["score"]["batch_size"]}
    return cfg

"""Load and validate the workflow config against ``schemas/config.schema.yaml``.

Validation fills defaults (nested ones included), rejects unknown keys and wrong types with a
message naming the key, then runs the checks a schema cannot express (files exist, prompts fit
the rewards). Every check runs before any job starts.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from rewardloop.mappings import deep_merge  # noqa: F401  (config.deep_merge: recipes, tests)

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """The config (or a file it names) is not usable; the message names the key or file."""


def load_schema() -> dict:
    """The schema file, with ``model.family``'s and ``train.loss``'s choices and each objective's section from
    their registries."""
    from rewardloop.models.families import family_names
    from rewardloop.objectives import OBJECTIVES

    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    schema["properties"]["model"]["properties"]["family"]["enum"] = family_names()
    train = schema["properties"]["train"]["properties"]
    train["loss"]["enum"] = sorted(OBJECTIVES)
    for name, objective in OBJECTIVES.items():
        train[name] = objective.schema()
    return schema


def _with_defaults(validator_class):
    """A jsonschema validator class that fills in `default` values while validating."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _is_integer(checker, instance) -> bool:
    """Only ints: JSON Schema's integer admits 2.0, and a 2.0 reaching a job fails there (after Snakemake
    has deleted the finished outputs its param change made stale)."""
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_finite_number(checker, instance) -> bool:
    """Finite numbers only: a .nan guidance scale would silently turn guidance off, an .inf a step size."""
    return (isinstance(instance, (int, float)) and not isinstance(instance, bool)
            and math.isfinite(instance))


def _strict(validator_class):
    checker = validator_class.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_finite_number})
    return jsonschema.validators.extend(validator_class, type_checker=checker)


_Validator = _with_defaults(_strict(jsonschema.Draft202012Validator))


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def _message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message; for a oneOf (a reward's weight) also what would have been valid."""
    value, types = error.instance, error.validator_value
    if error.validator == "type" and isinstance(value, float) and not isinstance(value, bool):
        if not math.isfinite(value):
            return f"{value} is not a finite number"
        if "integer" in ([types] if isinstance(types, str) else types) and value.is_integer():
            return f"{value} is not an integer (write {int(value)})"
    if error.validator != "oneOf":
        return error.message
    def kind(schema):
        required = schema.get("required")
        return schema["type"] + (f" with {', '.join(required)}" if required else "")
    return f"{error.message} (expected a {' or an '.join(kind(s) for s in error.validator_value)})"


def validate(config: dict) -> dict:
    """Validate ``config`` in place (defaults filled) and return it; raise ConfigError on failure."""
    complete(config)
    check_semantics(config)
    return config


def complete(config: dict) -> dict:
    """``config`` checked against the schema and completed in place (defaults, family defaults), without
    the checks of files on disk (``validate`` does both)."""
    _drop_null_rewards(config)
    refuse_moved_keys(config)
    _typed_command_line_values(config, load_schema())
    errors = sorted(_Validator(load_schema()).iter_errors(config), key=lambda e: list(e.path))
    if errors:
        lines = [f"  {_key_path(e)}: {_message(e)}" for e in errors]
        raise ConfigError("invalid config:\n" + "\n".join(lines))
    _fill_family_defaults(config)
    _normalise_paths(config)
    # Only the chosen objective's section stays: the others' options would be params of no use.
    for name in [k for k in config["train"] if k != config["train"]["loss"] and k in _objective_names()]:
        del config["train"][name]
    return config


_BOOLEANS = {"true": True, "false": False}


def _typed_command_line_values(value: Any, schema: Mapping) -> Any:
    """``value`` with the type its ``schema`` declares, for the strings of ``--config``: Snakemake reads a
    list (``seeds=[0,1]``) or a nested mapping (``'eval={seeds: [0, 1]}'``) with YAML's BaseLoader, so
    every item in it is a string. Booleans, numbers and nulls among them are typed, in mappings (in
    place) and lists at any depth; a string stays one where the schema takes no other type."""
    alternatives = [schema, *schema.get("oneOf", ()), *schema.get("anyOf", ())]  # a reward: weight or mapping
    if isinstance(value, dict):
        properties = {k: v for s in alternatives for k, v in (s.get("properties") or {}).items()}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            spec = properties.get(key, extra)
            if isinstance(spec, Mapping):
                value[key] = _typed_command_line_values(item, spec)
        return value
    if isinstance(value, list):
        items = schema.get("items")
        return [_typed_command_line_values(item, items) for item in value] if isinstance(items, Mapping) else value
    if not isinstance(value, str):
        return value
    types = {t for s in alternatives for t in _as_list(s.get("type", []))}
    if "boolean" in types and value.lower() in _BOOLEANS:
        return _BOOLEANS[value.lower()]
    if "null" in types and value in ("null", "~"):
        return None
    if "integer" in types and re.fullmatch(r"[+-]?\d+", value):
        return int(value)
    if "number" in types:
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _as_list(value) -> list:
    return [value] if isinstance(value, str) else list(value)


def _objective_names() -> list[str]:
    from rewardloop.objectives import OBJECTIVES

    return sorted(OBJECTIVES)


def _fill_family_defaults(config: dict) -> None:
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
    if config["generate"]["precision"] == "auto":
        mixed = config["train"]["mixed_precision"]
        config["generate"]["precision"] = "fp32" if mixed == "no" else mixed


def _normalise_paths(config: dict) -> None:
    """Paths as one spelling (``./models/x/`` = ``models/x``): jobs' params compare them as strings, and
    another spelling of the same folder would rerun every job that names it."""
    import os

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


def _reward_names() -> set[str]:
    import rewardloop.rewards  # noqa: F401  (registers every reward)
    from rewardloop.rewards.base import available_rewards

    return set(available_rewards())


def _drop_null_rewards(config: dict) -> None:
    """A reward set to null is removed: recipes merge over config.yaml and drop its color_match so."""
    for section in (config, config.get("eval")):
        if isinstance(section, dict) and isinstance(section.get("rewards"), dict):
            section["rewards"] = {k: v for k, v in section["rewards"].items() if v is not None}


def load(path: str | Path, overrides: Mapping | None = None) -> dict:
    """Read a YAML config file, deep-merge ``overrides`` and validate."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} not found")
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return validate(deep_merge(config, overrides or {}))


def check_semantics(config: dict) -> None:
    """Checks beyond the schema: sizes, files on disk, prompts the rewards can score."""
    from rewardloop.models import lora, loading as models
    from rewardloop import prompts, rewards

    if config["generate"]["resolution"] % 8:
        raise ConfigError(
            f"generate.resolution: {config['generate']['resolution']} is not divisible by 8"
        )
    models.check_model_reference(config["model"])
    if not config["model"]["build_tiny"] and Path(config["model"]["path"]).is_dir():
        from rewardloop.models.layout import check_guidance, check_resolution

        check_resolution(config["model"]["path"], config["model"]["family"], config["generate"]["resolution"])
        scales = [("generate.guidance_scale", config["generate"]["guidance_scale"]),
                  ("eval.guidance_scale", config["eval"].get("guidance_scale")),
                  *(("eval.also_at_guidance", g) for g in config["eval"].get("also_at_guidance") or [])]
        for key, scale in scales:
            if scale is not None:
                check_guidance(config["model"]["path"], config["model"]["family"], scale, key)
    lora.check_init_lora(config["model"], config["train"])
    offline = config["data"]["offline_pairs"]
    if offline and not Path(offline).is_file():
        raise ConfigError(f"data.offline_pairs: {offline} is not a file (expected a Pick-a-Pic layout Parquet)")
    check_objective(config)
    _check_guidance_evals(config)
    sections = {"rewards": config["rewards"], "eval.rewards": config["eval"].get("rewards") or {},
                "gold_rewards": config["gold_rewards"]}
    for key in ("eval.rewards", "gold_rewards"):  # extra columns beside the trained rewards' own
        clash = sorted(set(sections[key]) & set(config["rewards"]))
        if clash:
            raise ConfigError(f"{key}: {', '.join(clash)} already in rewards (names must differ)")
    for key, section in sections.items():
        try:
            rewards.check_options(section or {}, key=key)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    for key in ("train", "eval"):
        loaded = prompts.load_prompts(config["prompts"][key], key=f"prompts.{key}")
        for prompt_id, prompt in zip(loaded.prompt_id, loaded.prompt):
            try:
                rewards.check_prompts(config["rewards"], [prompt])
                if config["gold_rewards"]:  # they rescore the rollouts and the eval images
                    rewards.check_prompts(config["gold_rewards"], [prompt])
            except ValueError as exc:
                raise ConfigError(f"prompts.{key} ({config['prompts'][key]}), prompt {prompt_id}: {exc}") from exc
        if key == "train":
            check_shards(config, len(prompts.select_prompts(loaded, config["generate"]["prompts_per_iteration"],
                                                            config["seed"], 0)))
    overlap = prompt_overlap(config) if config["prompts"]["overlap"] == "error" else None
    if overlap:
        raise ConfigError(f"{overlap} (prompts.overlap: error)")
    if config["prompts"]["too_long"] == "error":
        from rewardloop.models.prompt_lengths import long_prompts

        found = long_prompts(config)
        if found:
            raise ConfigError(f"{found[0].key} ({config['prompts'][found[0].key.split('.')[1]]}): prompt "
                              f"{found[0].prompt_id} is {found[0].tokens} tokens for {found[0].tokenizer}, over its "
                              f"limit of {found[0].limit} ({len(found)} over-long in all; prompts.too_long: error)")


def startup_warnings(config: Mapping) -> list[str]:
    """What a valid config should still tell the user at startup: eval prompts that are also train
    prompts, prompts a text encoder will cut."""
    lines = []
    overlap = prompt_overlap(config) if config["prompts"]["overlap"] == "warn" else None
    if overlap:
        lines.append(f"rewardloop: {overlap} (prompts.overlap: error stops instead)")
    if config["prompts"]["too_long"] == "warn":
        from rewardloop.models.prompt_lengths import long_prompts, warning_lines

        lines.extend(warning_lines(long_prompts(config)))
    return lines


# prompts.overlap's message names this many of the shared prompts (then counts the rest).
OVERLAP_IDS = 5


def prompt_overlap(config: Mapping) -> str | None:
    """Which eval prompts are also train prompts (so the eval does not hold them out), or None."""
    from rewardloop import prompts

    paths = config["prompts"]
    train, held_out = (prompts.load_prompts(paths[key], key=f"prompts.{key}") for key in ("train", "eval"))
    shared = prompts.shared_prompts(train, held_out)
    if not shared:
        return None
    named = ", ".join(f"{eval_id} (= train {train_id})" for eval_id, train_id in shared[:OVERLAP_IDS])
    more = f" and {len(shared) - OVERLAP_IDS} more" if len(shared) > OVERLAP_IDS else ""
    return (f"prompts.eval ({paths['eval']}): {len(shared)} of its {len(held_out)} prompts are also in prompts.train "
            f"({paths['train']}): {named}{more}; the eval does not hold them out")


def check_existing_iterations(config: Mapping, results: str | Path = "results") -> None:
    """Refuse a run that plans fewer iterations than ``results`` already holds: rule all would leave the
    later ones out, silently orphaned beside a report and summary that no longer match them."""
    folder = Path(results)
    beyond = sorted(p.name for p in folder.glob("iter_[0-9][0-9][0-9]")
                    if p.is_dir() and int(p.name[len("iter_"):]) >= config["iterations"])
    if beyond:
        keep = int(beyond[-1][len("iter_"):]) + 1
        raise ConfigError(f"iterations: {config['iterations']}, but {folder}/ already holds {', '.join(beyond)} "
                          f"of a longer run; set iterations: {keep} to keep them, or move them out of {folder}/")


def check_shards(config: dict, prompts_per_iteration: int) -> None:
    """Every shard of generate/score gets at least one whole batch (see sharding.shard_rows)."""
    from rewardloop.runtime.sharding import ShardError, shard_rows

    samples = prompts_per_iteration * config["generate"]["images_per_prompt"]
    for stage in ("generate", "score"):
        try:
            shard_rows(samples, config[stage]["batch_size"], config[stage]["shards"], 0, key=f"{stage}.shards")
        except ShardError as exc:
            raise ConfigError(str(exc)) from exc


def check_objective(config: dict) -> None:
    """The objective (``train.loss``) fits the model family, the adapter, the processes and the data;
    then its own checks (e.g. GRPO's step strategy)."""
    from rewardloop.models.families import get_family
    from rewardloop.objectives import ObjectiveError, get_objective
    from rewardloop.sampling.schedulers import SamplerError, check_sampler

    train, family = config["train"], config["model"]["family"]
    objective = get_objective(train["loss"])
    name = objective.name
    if not objective.supports(get_family(family)):
        raise ConfigError(f"train.loss: {name} is not available for model.family {family} "
                          f"({name} trains {', '.join(objective.family_names())})")
    if train["adapter"] != "lora" and not objective.full_model:
        raise ConfigError(f"train.adapter: {name} trains a LoRA (its reference is the LoRA disabled); "
                          "set train.adapter: lora")
    processes = train["num_processes"] or 1
    if processes > 1 and not objective.multi_process:
        raise ConfigError(f"train.num_processes: {name} trains in one process (its micro-batches are not "
                          "split over ranks); set train.num_processes: null or 1")
    drawn = config["generate"]["prompts_per_iteration"]  # null: every train prompt (counted by check_shards)
    rollouts = (drawn or processes) * config["generate"]["images_per_prompt"]
    if objective.signal == "advantages" and processes > rollouts:
        raise ConfigError(f"train.num_processes: {processes} processes for {rollouts} samples per iteration "
                          f"(generate.prompts_per_iteration x generate.images_per_prompt): every rank needs at least "
                          "one sample of each batch; use fewer processes or more samples")
    if config["data"]["offline_pairs"] and not objective.offline_pairs:
        raise ConfigError(f"data.offline_pairs: {name} trains on online rollouts' {objective.signal}, not on "
                          "offline pairs; set data.offline_pairs: null")
    try:
        objective.check(config)
    except ObjectiveError as exc:
        raise ConfigError(str(exc)) from exc
    generate = config["generate"]
    try:
        check_sampler(generate["scheduler"], get_family(family).flow_matching, generate["eta"], objective.records_steps)
    except SamplerError as exc:
        raise ConfigError(str(exc)) from exc


def refuse_moved_keys(config: Mapping) -> None:
    """Options of one objective moved from ``train`` into its own section: name the new key."""
    from rewardloop.objectives import OBJECTIVES

    train = config.get("train")
    if not isinstance(train, Mapping):
        return
    moved: dict[str, list[str]] = {}
    for name, objective in OBJECTIVES.items():
        for old, new in objective.moved_keys.items():
            moved.setdefault(old, []).append(f"train.{name}.{new}")
    errors = [f"  train.{key}: now {' or '.join(moved[key])} (each objective's options live in its own section)"
              for key in train if key in moved]
    if errors:
        raise ConfigError("invalid config:\n" + "\n".join(errors))


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
    if inputs:
        selected["inputs"] = inputs
    return selected


def input_identities(config: Mapping, sections) -> dict[str, str]:
    """{config key: fingerprint} of the files outside results/ that these sections make a job read: the
    base model, model.init_lora, the rewards' checkpoints (models.fingerprint). In a job's params, a
    changed file reruns the jobs that read it, though its path stays the same; a model folder a rule
    builds (model.build_tiny) is a Snakemake input instead."""
    from rewardloop.models.fingerprint import fingerprint, is_local
    from rewardloop.rewards.base import path_options

    found = {}
    if "model" in sections:
        model = config["model"]
        if not model.get("build_tiny") and is_local(model["path"]):
            found["model.path"] = fingerprint(model["path"])
        if model.get("init_lora") and is_local(model["init_lora"]):
            found["model.init_lora"] = fingerprint(model["init_lora"])
    reward_sections = [("rewards", config.get("rewards") or {})] if "rewards" in sections else []
    if "eval" in sections:
        reward_sections.append(("eval.rewards", config["eval"].get("rewards") or {}))
    if "gold_rewards" in sections:
        reward_sections.append(("gold_rewards", config["gold_rewards"]))
    for key, rewards in reward_sections:
        for name, value in rewards.items():
            for option in path_options(name) if isinstance(value, Mapping) else ():
                if value.get(option) and is_local(value[option]):
                    found[f"{key}.{name}.{option}"] = fingerprint(value[option])
    return found


# (section, key) pairs that change how many jobs do a stage's work, never its result.
JOB_SPLIT_KEYS = (("generate", "shards"), ("score", "shards"))


def _check_guidance_evals(config: Mapping) -> None:
    main = config["eval"].get("guidance_scale")
    main = config["generate"]["guidance_scale"] if main is None else main
    if float(main) in guidance_evals(config).values():
        raise ConfigError(f"eval.also_at_guidance: {float(main):g} is the eval's own CFG scale (eval.guidance_scale, "
                          f"or generate.guidance_scale when that is null): list only further scales")


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
    if config["eval"].get("guidance_scale") is None:  # else eval's own guidance, not the rollouts'
        generate = ("guidance_scale", *generate)
    return stage_config(config, "model", "prompts", "generate", "eval", "rewards", "score", "device",
                        keep={"prompts": ("eval",), "generate": generate})


def guidance_evals(config: Mapping) -> dict[str, float]:
    """{name: CFG scale} of the further evals of ``eval.also_at_guidance``: ``eval_cfg1`` for 1.0, ``eval_cfg4.5``
    for 4.5. The name is the files' (``eval_cfg1.parquet``, ``metrics/eval_cfg1.json``) and the metrics'
    prefix (``eval_cfg1/reward/mean``)."""
    return {f"eval_cfg{float(g):g}": float(g) for g in config["eval"].get("also_at_guidance") or ()}

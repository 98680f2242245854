"""The config's JSON schema (``schemas/config.schema.yaml`` plus the registries' choices) and its validator.

The validator fills ``default`` values (nested ones included) while it validates, and its types are strict:
an integer is an int (not 2.0), a number is finite (not .nan or .inf).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import jsonschema
import yaml

# src/rewardloop/config/schema.py -> the repository root, three folders up from this one.
SCHEMA_PATH = Path(__file__).resolve().parents[3] / "schemas" / "config.schema.yaml"


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


Validator = _with_defaults(_strict(jsonschema.Draft202012Validator))


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


def check_schema(config: dict, schema: dict) -> None:
    """Validate ``config`` against ``schema`` in place (defaults filled); a ConfigError lists every error,
    each under its key."""
    errors = sorted(Validator(schema).iter_errors(config), key=lambda e: list(e.path))
    if errors:
        lines = [f"  {_key_path(e)}: {_message(e)}" for e in errors]
        raise ConfigError("invalid config:\n" + "\n".join(lines))

"""Typing of the strings that ``snakemake --config key=value`` hands over, by the schema's declared types."""

from __future__ import annotations

import re
from typing import Any, Mapping

_BOOLEANS = {"true": True, "false": False}


def typed_command_line_values(value: Any, schema: Mapping) -> Any:
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
                value[key] = typed_command_line_values(item, spec)
        return value
    if isinstance(value, list):
        items = schema.get("items")
        return [typed_command_line_values(item, items) for item in value] if isinstance(items, Mapping) else value
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
    """A schema's ``type``, one name or a list of them, as a list."""
    return [value] if isinstance(value, str) else list(value)

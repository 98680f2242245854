"""An objective's own config section (``train.<objective>``) as a typed dataclass.

Each option is a dataclass field made with :func:`option`: its default, its description and its
JSON-schema limits live in one place, the objective's module. :func:`section_schema` turns the
dataclass into the schema fragment that config validation uses (defaults filled, unknown keys
refused), so a parameter can be followed from ``schemas/`` to the line that reads it.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping

_JSON_TYPES = {float: "number", int: "integer", bool: "boolean", str: "string"}


def option(default: Any, doc: str, **schema: Any) -> Any:
    """A dataclass field: ``default``, a description (with its source) and JSON-schema keywords."""
    return dataclasses.field(default=default, metadata={"doc": doc, "schema": schema})


def _json_type(annotation) -> str | list[str]:
    args = typing.get_args(annotation)
    if args:  # Optional[X]: X or null
        kinds = [_JSON_TYPES[a] for a in args if a is not type(None)]
        return [*kinds, "null"] if type(None) in args else kinds
    return _JSON_TYPES[annotation]


def section_schema(options_class, description: str) -> dict:
    """The JSON schema of ``options_class`` (an object with defaults, no other keys)."""
    hints = typing.get_type_hints(options_class)
    properties = {}
    for field in dataclasses.fields(options_class):
        properties[field.name] = {
            "type": _json_type(hints[field.name]),
            "default": field.default,
            "description": field.metadata["doc"],
            **field.metadata["schema"],
        }
    return {"type": "object", "additionalProperties": False, "default": {}, "description": description,
            "properties": properties}


def from_section(options_class, section: Mapping | None):
    """The dataclass of a validated section (defaults for keys it lacks)."""
    names = {f.name for f in dataclasses.fields(options_class)}
    return options_class(**{k: v for k, v in (section or {}).items() if k in names})


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """An objective without options of its own."""

"""The config's way in: ``complete`` (schema, defaults), ``validate`` (and the checks of files on disk),
``load`` (a YAML file, overrides merged over it)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import yaml

from rewardloop.config.checks import check_semantics, refuse_moved_keys
from rewardloop.config.command_line import typed_command_line_values
from rewardloop.config.defaults import drop_null_rewards, drop_unchosen_objectives, fill_family_defaults, normalise_paths
from rewardloop.config.schema import ConfigError, check_schema, load_schema
from rewardloop.mappings import deep_merge


def complete(config: dict) -> dict:
    """``config`` checked against the schema and completed in place (defaults, family defaults), without
    the checks of files on disk (``validate`` does both)."""
    drop_null_rewards(config)
    refuse_moved_keys(config)
    schema = load_schema()
    typed_command_line_values(config, schema)
    check_schema(config, schema)
    fill_family_defaults(config)
    normalise_paths(config)
    drop_unchosen_objectives(config)
    return config


def validate(config: dict) -> dict:
    """Validate ``config`` in place (defaults filled) and return it; raise ConfigError on failure."""
    complete(config)
    check_semantics(config)
    return config


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

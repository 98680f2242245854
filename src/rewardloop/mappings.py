"""Nested mappings: a config file merged over another (what Snakemake does with --configfile), and
published configs with tiny widths merged over them. Imports nothing of the project."""

from __future__ import annotations

import copy
from typing import Mapping


def deep_merge(base: dict, extra: Mapping) -> dict:
    """A copy of ``base`` with ``extra`` merged in: nested mappings key by key, anything else replaced."""
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged

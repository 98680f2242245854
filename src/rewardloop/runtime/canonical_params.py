"""Jobs' params compared by value: the order of a config's keys never reruns a finished job.

Snakemake reruns a finished job when its params changed, and it compares them by their ``repr``, which
lists a dict's keys in insertion order: a config file with the same values in another key order, or a
``--config 'model={path: ...}'`` restating a value (merged into the section in another order), planned
the whole run again. So every rule's params are given a form whose ``repr`` is canonical (``apply``,
called once the Snakefile has defined its rules): a dict param becomes a ``CanonicalDict`` (its repr
lists keys sorted, at every depth), and a param function's dict result likewise. The job receives the
same values (a ``CanonicalDict`` is a dict).

Runs finished before this recorded their params in insertion order: ``canonicalize_records`` rewrites
those records once (the value each record states is kept; only its spelling changes), so that an
upgrade reruns nothing.
"""

from __future__ import annotations

import ast
import functools
import json
from pathlib import Path
from typing import Any, Iterable

# Written once Snakemake's records of this working directory have been rewritten to the canonical form.
MARKER = "rewardloop-canonical-params"


def canonical(value: Any) -> Any:
    """``value`` with every dict's keys sorted (by their repr, so keys of mixed types sort too)."""
    if isinstance(value, dict):
        return {key: canonical(value[key]) for key in sorted(value, key=repr)}
    if type(value) is list:
        return [canonical(item) for item in value]
    if type(value) is tuple:
        return tuple(canonical(item) for item in value)
    return value


class CanonicalDict(dict):
    """A dict whose repr (what Snakemake records and compares) does not depend on key order."""

    def __repr__(self) -> str:
        return repr(canonical(dict(self)))

    def __reduce__(self):  # pickled into the job's script as the plain dict it is
        return dict, (dict(self),)



def _canonical_param(value: Any) -> Any:
    if isinstance(value, dict) and not isinstance(value, CanonicalDict):
        return CanonicalDict(value)
    if callable(value) and not isinstance(value, type):
        return _canonical_function(value)
    return value


def _canonical_function(func):
    # functools.wraps keeps the signature Snakemake inspects (which of wildcards, input, output,
    # threads, resources the function takes)
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        result = func(*args, **kwargs)
        return CanonicalDict(result) if isinstance(result, dict) else result

    return wrapper


def apply(rules: Iterable) -> None:
    """Give every param of these Snakemake rules its canonical form (in place)."""
    for rule in rules:
        params = rule.params
        names = {index: name for name, (index, _end) in params._names.items()}
        for index, value in enumerate(params):
            canonical_value = _canonical_param(value)
            if canonical_value is value:
                continue
            params[index] = canonical_value
            if index in names:
                setattr(params, names[index], canonical_value)


def canonical_repr(recorded: str) -> str:
    """A recorded param's repr in the canonical form (unchanged if it is not a dict literal)."""
    if not recorded.startswith("{"):
        return recorded
    try:
        value = ast.literal_eval(recorded)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return recorded
    return repr(canonical(value)) if isinstance(value, dict) else recorded


def canonicalize_record(record: Path) -> bool:
    """Rewrite one Snakemake record's params in the canonical form; True if it changed."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return False  # not a record we can read: Snakemake decides what it makes of it
    params = data.get("params") if isinstance(data, dict) else None
    if not isinstance(params, list):
        return False
    canonical_params = [canonical_repr(p) if isinstance(p, str) else p for p in params]
    if canonical_params == params:
        return False
    data["params"] = canonical_params
    tmp = record.with_name(record.name + ".rewardloop-tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(record)  # Snakemake never reads half a record
    return True


def canonicalize_records(metadata: Path) -> int:
    """Rewrite Snakemake's records under ``metadata`` once, so that their params compare by value (later
    records are written canonical; one restored from an older copy is rewritten as it is restored:
    runtime/job_records.py); returns how many changed."""
    marker = metadata.parent / MARKER
    if marker.exists() or not metadata.is_dir():
        return 0
    changed = sum(canonicalize_record(path) for path in metadata.rglob("*") if path.is_file())
    marker.write_text("Snakemake's records of params here are canonical (rewardloop.runtime.canonical_params)\n")
    return changed

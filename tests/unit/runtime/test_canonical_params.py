"""Params compared by value (src/rewardloop/runtime/canonical_params.py)."""

from __future__ import annotations

import json
import pickle

from rewardloop.runtime import canonical_params
from rewardloop.runtime.canonical_params import CanonicalDict, canonical_repr

SAME = ({"model": {"path": "m", "family": "sd15"}, "seed": 0, "lists": [{"b": 1, "a": 2}]},
        {"seed": 0, "lists": [{"a": 2, "b": 1}], "model": {"family": "sd15", "path": "m"}})


def test_the_repr_of_equal_dicts_is_the_same_whatever_the_order_of_their_keys_and_lists_keep_their_order():
    first, second = (CanonicalDict(value) for value in SAME)
    assert repr(first) == repr(second)
    assert repr(first) != repr(CanonicalDict({**SAME[0], "lists": [{"a": 2}, {"b": 1}]}))
    assert repr(CanonicalDict({1: "int key", "a": "str key"}))  # keys of mixed types sort too
    assert first == SAME[0]


def test_a_job_receives_a_plain_dict():
    value = pickle.loads(pickle.dumps(CanonicalDict(SAME[0])))
    assert type(value) is dict and value == SAME[0]


def test_a_recorded_repr_is_rewritten_to_the_canonical_one_and_anything_else_is_kept():
    assert canonical_repr(repr(SAME[1])) == repr(CanonicalDict(SAME[0]))
    for recorded in ("'results/iter_000/train'", "None", "[3, 1, 2]", "{'a': float('nan')}", "{not python"):
        assert canonical_repr(recorded) == recorded


def test_records_are_rewritten_once_and_only_their_params_change(tmp_path):
    metadata = tmp_path / ".snakemake/metadata"
    record = metadata / "cmVzdWx0cy9h"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"rule": "generate", "params": [repr(SAME[1]), "None"], "code": "x"}))
    (metadata / "not-a-record").write_text("{")
    assert canonical_params.canonicalize_records(metadata) == 1
    data = json.loads(record.read_text())
    assert data == {"rule": "generate", "params": [repr(CanonicalDict(SAME[1])), "None"], "code": "x"}
    record.write_text(json.dumps({"rule": "generate", "params": [repr(SAME[1])]}))
    assert canonical_params.canonicalize_records(metadata) == 0  # once: later records are written canonical

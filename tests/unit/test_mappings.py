"""rewardloop.mappings.deep_merge: a config file over another, nested mappings key by key."""

from __future__ import annotations

from types import MappingProxyType

from rewardloop.mappings import deep_merge


def test_nested_mappings_merge_key_by_key_and_other_values_are_replaced():
    base = {"train": {"lr": 1.0, "lora": {"rank": 4, "alpha": 4}}, "seeds": [0, 1], "device": "cpu"}
    extra = {"train": {"lora": {"rank": 8}}, "seeds": [5], "new": {"a": 1}}
    merged = deep_merge(base, extra)
    assert merged == {"train": {"lr": 1.0, "lora": {"rank": 8, "alpha": 4}}, "seeds": [5], "device": "cpu",
                      "new": {"a": 1}}


def test_a_mapping_replaces_a_non_mapping_and_a_scalar_replaces_a_mapping():
    assert deep_merge({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}
    assert deep_merge({"a": {"b": 2}}, {"a": None}) == {"a": None}


def test_any_mapping_type_merges_in():
    assert deep_merge({"a": {"b": 1, "c": 2}}, MappingProxyType({"a": MappingProxyType({"c": 3})})) == \
        {"a": {"b": 1, "c": 3}}


def test_inputs_are_left_untouched_and_the_result_shares_nothing_with_them():
    base, extra = {"a": {"b": [1]}}, {"c": {"d": [2]}}
    merged = deep_merge(base, extra)
    merged["a"]["b"].append(9)
    merged["c"]["d"].append(9)
    assert base == {"a": {"b": [1]}} and extra == {"c": {"d": [2]}}

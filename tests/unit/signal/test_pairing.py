import pandas as pd
import pytest

from rewardloop.signal.pairing import PAIR_COLUMNS, build_pairs


def _scores(rows):
    return pd.DataFrame(rows, columns=["sample_id", "prompt_id", "reward"])


SCORES = _scores(
    [
        ("a0", 0, 0.2), ("a1", 0, 0.9), ("a2", 0, 0.5),
        ("b0", 1, 0.4), ("b1", 1, 0.4),  # tie: no pair
        ("c0", 2, 1.0),  # group of one: no pair
        ("d0", 3, -1.0), ("d1", 3, 0.0), ("d2", 3, -0.95),
    ]
)


def test_best_vs_worst():
    pairs = build_pairs(SCORES)
    assert list(pairs.columns) == PAIR_COLUMNS
    triples = pairs[["prompt_id", "chosen", "rejected"]].values.tolist()
    assert triples == [[0, "a1", "a0"], [3, "d1", "d0"]]
    assert pairs["margin"].tolist() == pytest.approx([0.7, 1.0])
    assert pairs["chosen_reward"].tolist() == [0.9, 0.0]
    assert pairs["rejected_reward"].tolist() == [0.2, -1.0]


def test_all_above_margin_applies_threshold():
    pairs = build_pairs(SCORES, strategy="all_above_margin", min_margin=0.1)
    assert pairs[["prompt_id", "chosen", "rejected"]].values.tolist() == [
        [0, "a1", "a0"], [0, "a1", "a2"], [0, "a2", "a0"], [3, "d1", "d0"], [3, "d1", "d2"],
    ]  # d2 vs d0 (margin 0.05) is below the threshold


def test_margin_threshold_drops_best_vs_worst_pair():
    pairs = build_pairs(SCORES, min_margin=0.8)
    assert pairs["chosen"].tolist() == ["d1"]


def test_only_ties_and_singletons_give_empty_table():
    pairs = build_pairs(_scores([("x", 0, 1.0), ("y", 0, 1.0), ("z", 1, 3.0)]))
    assert pairs.empty and list(pairs.columns) == PAIR_COLUMNS


def test_output_is_deterministic_under_row_order():
    shuffled = SCORES.sample(frac=1.0, random_state=3)
    for strategy in ("best_vs_worst", "all_above_margin"):
        expected = build_pairs(SCORES, strategy)
        pd.testing.assert_frame_equal(build_pairs(shuffled, strategy), expected)


def test_unknown_strategy_names_config_key():
    with pytest.raises(ValueError, match=r"pairs\.strategy.*'random'"):
        build_pairs(SCORES, strategy="random")


def test_bad_tables_are_rejected():
    with pytest.raises(ValueError, match="reward"):
        build_pairs(SCORES.drop(columns="reward"))
    with pytest.raises(ValueError, match="non-finite.*'q'"):
        build_pairs(_scores([("p", 0, 1.0), ("q", 0, float("nan"))]))
    with pytest.raises(ValueError, match="duplicate sample_id 'p'"):
        build_pairs(_scores([("p", 0, 1.0), ("p", 0, 2.0)]))


def test_ties_for_best_or_worst_break_on_sample_id():
    pairs = build_pairs(_scores([("m", 0, 2.0), ("k", 0, 2.0), ("z", 0, 0.0), ("y", 0, 0.0)]))
    assert pairs[["chosen", "rejected"]].values.tolist() == [["k", "y"]]


def test_integer_rewards_give_float_columns_and_a_fresh_index():
    pairs = build_pairs(_scores([("a", 1, 3), ("b", 1, 1), ("c", 0, 2), ("d", 0, 0)]))
    assert [str(pairs[c].dtype) for c in PAIR_COLUMNS[3:]] == ["float64"] * 3
    assert list(pairs.index) == [0, 1] and pairs.prompt_id.tolist() == [0, 1]


@pytest.mark.parametrize("margin", [-0.5, float("nan"), float("inf")])
def test_bad_min_margin_names_the_key(margin):
    with pytest.raises(ValueError, match=r"^pairs\.min_margin must be a finite number >= 0, got "):
        build_pairs(SCORES, min_margin=margin)


def test_messages_list_what_was_expected():
    with pytest.raises(ValueError, match=r"expected one of best_vs_worst, all_above_margin$"):
        build_pairs(SCORES, strategy="random")
    with pytest.raises(ValueError, match=r"^scores table lacks column\(s\) prompt_id, reward$"):
        build_pairs(SCORES.drop(columns=["reward", "prompt_id"]))
    with pytest.raises(ValueError, match="non-finite reward for sample_id 'q'"):
        build_pairs(_scores([("p", 0, 1.0), ("q", 0, "high")]))


# --- empty and reordered pair tables ------------------------------------------------------------------------

def test_pair_tables_keep_their_dtypes_when_empty_and_a_fresh_index_when_reordered():
    from rewardloop.signal.pairing import PAIR_COLUMNS, build_pairs

    def scores(rows):
        return pd.DataFrame(rows, columns=["sample_id", "prompt_id", "reward"])

    empty = build_pairs(scores([("a", "p", 1.0), ("b", "p", 1.0)]))
    assert empty.empty and [str(empty[c].dtype) for c in PAIR_COLUMNS[3:]] == ["float64"] * 3
    # Ranked by reward z > a > m: found as (z, a), (z, m), (a, m), stored sorted by chosen then rejected.
    pairs = build_pairs(scores([("z", "p", 3.0), ("a", "p", 2.0), ("m", "p", 1.0)]), "all_above_margin")
    assert pairs[["chosen", "rejected"]].values.tolist() == [["a", "m"], ["z", "a"], ["z", "m"]]
    assert list(pairs.index) == [0, 1, 2]

"""Step strategies pick valid SDE steps, as pure functions of their seeds."""

from __future__ import annotations

import pytest

from rewardloop.sampling.step_strategies import StepStrategyError, select_sde_steps

SEEDS = list(range(100, 140))


def test_sde_window_is_a_seeded_contiguous_window_inside_its_range():
    cfg = {"strategy": "sde_window", "num_sde_steps": 3, "window_range": [2, 9]}
    steps = select_sde_steps(cfg, 10, SEEDS, iteration_seed=0)
    assert steps == select_sde_steps(cfg, 10, SEEDS, iteration_seed=5)  # per sample, not per iteration
    for window in steps:
        assert window == list(range(window[0], window[0] + 3)) and 2 <= window[0] and window[-1] < 9
    assert len({w[0] for w in steps}) > 1  # samples get different windows
    assert select_sde_steps({**cfg, "window_range": None, "num_sde_steps": 10}, 10, SEEDS[:2], 0) == [
        list(range(10))] * 2


def test_epoch_global_random_choice_is_shared_and_seeded_per_iteration():
    cfg = {"strategy": "epoch_global_random_choice", "num_sde_steps": 2, "candidate_steps": [1, 3, 5, 7]}
    steps = select_sde_steps(cfg, 10, SEEDS, iteration_seed=1)
    assert all(s == steps[0] for s in steps) and set(steps[0]) <= {1, 3, 5, 7} and len(set(steps[0])) == 2
    assert steps == select_sde_steps(cfg, 10, SEEDS, iteration_seed=1)
    draws = {tuple(select_sde_steps(cfg, 10, SEEDS[:1], iteration_seed=i)[0]) for i in range(20)}
    assert len(draws) > 1


@pytest.mark.parametrize("cfg, match", [
    ({"strategy": "sde_window", "num_sde_steps": 4, "window_range": [0, 3]}, "num_sde_steps"),
    ({"strategy": "sde_window", "num_sde_steps": 1, "window_range": [5, 12]}, "window_range"),
    ({"strategy": "epoch_global_random_choice", "num_sde_steps": 1, "candidate_steps": [10]}, "candidate_steps"),
    ({"strategy": "nope", "num_sde_steps": 1}, "unknown"),
])
def test_invalid_selections_name_the_key(cfg, match):
    with pytest.raises(StepStrategyError, match=match):
        select_sde_steps(cfg, 10, SEEDS, 0)


def test_the_limits_of_a_selection_exactly():
    one = select_sde_steps({"strategy": "sde_window", "num_sde_steps": 1, "window_range": [2, 3]}, 10, SEEDS, 0)
    assert all(s == [2] for s in one)  # one step is allowed, and a window one step wide
    with pytest.raises(StepStrategyError, match=r"^generate\.sde\.window_range: \[3, 3\) must lie within the 10 "
                                                r"sampling steps$"):
        select_sde_steps({"strategy": "sde_window", "num_sde_steps": 1, "window_range": [3, 3]}, 10, SEEDS, 0)
    with pytest.raises(StepStrategyError, match=r"^generate\.sde\.num_sde_steps: 0 does not fit"):
        select_sde_steps({"strategy": "sde_window", "num_sde_steps": 0}, 10, SEEDS, 0)
    with pytest.raises(StepStrategyError, match=r"^generate\.sde\.strategy: unknown 'nope'; known: "
                                                r"epoch_global_random_choice, sde_window$"):
        select_sde_steps({"strategy": "nope", "num_sde_steps": 1}, 10, SEEDS, 0)


# --- a strategy registered at run time ----------------------------------------------------------------------

def test_a_strategy_registered_at_run_time_is_selectable():
    from rewardloop.sampling import step_strategies

    def every_other(cfg, num_steps, sample_seeds, iteration_seed):
        return [list(range(0, num_steps, 2)) for _ in sample_seeds]

    try:
        assert step_strategies.register("every_other")(every_other) is every_other
        assert step_strategies.select_sde_steps({"strategy": "every_other"}, 5, [1, 2], 0) == [[0, 2, 4]] * 2
    finally:
        step_strategies.STRATEGIES.pop("every_other", None)

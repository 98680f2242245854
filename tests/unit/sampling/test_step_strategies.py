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
                                                r"epoch_global_random_choice, mixgrpo_window, sde_window$"):
        select_sde_steps({"strategy": "nope", "num_sde_steps": 1}, 10, SEEDS, 0)


# --- a strategy registered at run time ----------------------------------------------------------------------

def test_a_strategy_registered_at_run_time_is_selectable():
    from rewardloop.sampling import step_strategies

    def every_other(cfg, num_steps, sample_seeds, iteration_seed, iteration):
        return [list(range(0, num_steps, 2)) for _ in sample_seeds]

    try:
        assert step_strategies.register("every_other")(every_other) is every_other
        assert step_strategies.select_sde_steps({"strategy": "every_other"}, 5, [1, 2], 0) == [[0, 2, 4]] * 2
    finally:
        step_strategies.STRATEGIES.pop("every_other", None)


class ReferenceWindow:
    """MixGRPO's GRPOTrainingStates (Tencent-Hunyuan/MixGRPO fastvideo/utils/grpo_states.py), transcribed as its
    state machine for sample_strategy progressive with prog_overlap: the window of an iteration is read before the
    iteration's update, which moves the start by the stride every iters_per_group iterations and, past
    max_timesteps, rolls it back to 0 or clamps it there."""

    def __init__(self, steps, size, iters_per_group, stride, roll_back):
        self.max_timesteps, self.size, self.period, self.stride = steps - 2, size, iters_per_group, stride
        self.roll_back, self.start, self.in_group = roll_back, 0, 0

    def window(self):
        return list(range(self.start, min(self.start + self.size, self.max_timesteps)))

    def update(self):
        self.in_group += 1
        if self.in_group >= self.period:
            self.in_group = 0
            self.start += self.stride
        if self.start > self.max_timesteps:
            self.start = 0 if self.roll_back else self.max_timesteps


@pytest.mark.parametrize("steps, size, period, stride", [(25, 4, 25, 1), (25, 4, 20, 1), (25, 4, 20, 0),
                                                         (10, 3, 2, 2), (10, 2, 1, 3), (7, 4, 3, 1)],
                         ids=["MixGRPO", "Flash", "Flash*", "stride-2", "stride-3", "wide"])
def test_mixgrpo_window_is_the_references_until_its_first_empty_window(steps, size, period, stride):
    """Iteration by iteration the reference's window, for every sample, up to the iteration where the reference's
    window would be empty (its start at steps - 2): there ours has rolled back to 0 (the departure), or, without
    roll-back, stays at its last non-empty place."""
    for roll_back in (True, False):
        reference = ReferenceWindow(steps, size, period, stride, roll_back)
        cfg = {"strategy": "mixgrpo_window", "num_sde_steps": size, "iters_per_window": period,
               "window_stride": stride, "roll_back": roll_back}
        emptied = False
        for iteration in range(3000):
            expected = reference.window()
            ours = select_sde_steps(cfg, steps, SEEDS[:3], iteration_seed=iteration * 7, iteration=iteration)
            if not expected:  # the reference's empty window: ours is the departure's
                last = max(range(0, steps - 2, stride)) if stride else 0
                assert ours[0][0] == (0 if roll_back else last), (iteration, ours)
                emptied = True
                break
            assert ours == [expected] * 3, (iteration, ours, expected)
            reference.update()
        # the reference's window empties where a start lands on steps - 2, or is clamped there
        assert emptied == (stride > 0 and (not roll_back or (steps - 2) % stride == 0)), (roll_back, emptied)
    frozen = select_sde_steps({**cfg, "window_stride": 0}, steps, SEEDS[:1], 0, iteration=10_000)
    assert frozen == [list(range(0, min(size, steps - 2)))]  # Flash*: the window stays at step 0


def test_mixgrpo_window_defaults_and_the_rollouts_it_needs():
    cfg = {"strategy": "mixgrpo_window", "num_sde_steps": 4}  # iters_per_window 25, stride 1, roll_back
    assert select_sde_steps(cfg, 25, SEEDS[:1], 0, iteration=24) == [[0, 1, 2, 3]]
    assert select_sde_steps(cfg, 25, SEEDS[:1], 0, iteration=25) == [[1, 2, 3, 4]]
    assert select_sde_steps(cfg, 25, SEEDS[:1], 0, iteration=25 * 21) == [[21, 22]]  # shrinks before step 23
    assert select_sde_steps(cfg, 25, SEEDS[:1], 0, iteration=25 * 23) == [[0, 1, 2, 3]]  # rolled back
    with pytest.raises(StepStrategyError, match="at least 3 sampling steps"):
        select_sde_steps(cfg, 2, SEEDS[:1], 0)

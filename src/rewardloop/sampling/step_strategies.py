"""Step strategies: which denoising steps of a rollout are SDE (recorded for training) and which ODE.

A strategy maps (its config, the number of sampling steps, each sample's seed, the iteration's seed, the
iteration) to, for every sample, the sorted step indices that are SDE steps. Selections are pure functions of
the seeds and the iteration, so a rerun or another shard picks the same steps. Register more with ``@register``.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

Strategy = Callable[[Mapping, int, Sequence[int], int, int], list[list[int]]]
STRATEGIES: dict[str, Strategy] = {}
_STREAM = 4242  # keeps step-selection draws apart from every other use of a sample's seed


class StepStrategyError(ValueError):
    pass


def register(name: str):
    def wrap(fn: Strategy) -> Strategy:
        STRATEGIES[name] = fn
        return fn

    return wrap


def _window_range(cfg: Mapping, num_steps: int) -> tuple[int, int]:
    lo, hi = cfg.get("window_range") or (0, num_steps)
    if not 0 <= lo < hi <= num_steps:
        raise StepStrategyError(
            f"generate.sde.window_range: [{lo}, {hi}) must lie within the {num_steps} sampling steps")
    return int(lo), int(hi)


def _count(cfg: Mapping, available: int, where: str) -> int:
    k = cfg["num_sde_steps"]
    if not 1 <= k <= available:
        raise StepStrategyError(f"generate.sde.num_sde_steps: {k} does not fit {where} ({available} steps)")
    return int(k)


@register("sde_window")
def sde_window(cfg: Mapping, num_steps: int, sample_seeds: Sequence[int], iteration_seed: int,
               iteration: int = 0) -> list[list[int]]:
    """A contiguous window of ``num_sde_steps`` steps inside ``window_range``, drawn per sample from its seed."""
    lo, hi = _window_range(cfg, num_steps)
    k = _count(cfg, hi - lo, f"window_range [{lo}, {hi})")
    starts = [int(np.random.default_rng([_STREAM, seed]).integers(lo, hi - k + 1)) for seed in sample_seeds]
    return [list(range(start, start + k)) for start in starts]


@register("epoch_global_random_choice")
def epoch_global_random_choice(cfg: Mapping, num_steps: int, sample_seeds: Sequence[int],
                               iteration_seed: int, iteration: int = 0) -> list[list[int]]:
    """``num_sde_steps`` of ``candidate_steps`` (default: all), drawn once per iteration for every sample."""
    candidates = sorted(set(cfg.get("candidate_steps") or range(num_steps)))
    if candidates[0] < 0 or candidates[-1] >= num_steps:
        raise StepStrategyError(
            f"generate.sde.candidate_steps: {candidates} must be step indices below {num_steps}")
    k = _count(cfg, len(candidates), "candidate_steps")
    chosen = np.random.default_rng([_STREAM, iteration_seed]).choice(candidates, size=k, replace=False)
    steps = sorted(int(s) for s in chosen)
    return [list(steps) for _ in sample_seeds]


@register("mixgrpo_window")
def mixgrpo_window(cfg: Mapping, num_steps: int, sample_seeds: Sequence[int], iteration_seed: int,
                   iteration: int = 0) -> list[list[int]]:
    """MixGRPO's sliding window (Tencent-Hunyuan/MixGRPO ``GRPOTrainingStates``, sample_strategy progressive with
    prog_overlap): the same ``num_sde_steps`` consecutive steps for every sample, starting at
    c = window_stride * (iteration // iters_per_window), the steps before it and after it ODE. The window ends
    before step ``num_steps - 2`` (the reference's max_timesteps, an exclusive bound: its last two steps are never
    SDE) and shrinks as it nears it. At the end it starts over from 0 (``roll_back``) or stays at its last place.
    Departure, beyond the reference scripts' 300 iterations: the reference's cycle also visits c = num_steps - 2,
    an empty window (nothing recorded, nothing trained); here the window rolls back before it."""
    end = num_steps - 2
    if end < 1:
        raise StepStrategyError(f"generate.sde.strategy mixgrpo_window: needs at least 3 sampling steps (the window "
                                f"ends before step steps - 2), not {num_steps}")
    size, stride, period = cfg["num_sde_steps"], cfg.get("window_stride", 1), cfg.get("iters_per_window", 25)
    starts = list(range(0, end, stride)) if stride > 0 else [0]  # every start whose window is not empty
    moves = iteration // period
    start = starts[moves % len(starts)] if cfg.get("roll_back", True) else starts[min(moves, len(starts) - 1)]
    return [list(range(start, min(start + size, end))) for _ in sample_seeds]


def select_sde_steps(cfg: Mapping, num_steps: int, sample_seeds: Sequence[int], iteration_seed: int,
                     iteration: int = 0) -> list[list[int]]:
    """Run the strategy named ``cfg['strategy']`` for ``iteration``; a clear error for an unknown name."""
    name = cfg["strategy"]
    if name not in STRATEGIES:
        raise StepStrategyError(f"generate.sde.strategy: unknown {name!r}; known: {', '.join(sorted(STRATEGIES))}")
    return STRATEGIES[name](cfg, num_steps, sample_seeds, iteration_seed, iteration)

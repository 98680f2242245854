"""The reward-hacking guard: an iteration's image health and gold rewards against the base model's.

Each threshold of the ``guard`` config is one check; a check that finds the iteration past its
threshold is a *breach*, with the figures that show it. Thresholds set to null are not checked.
Pure: figures in, breaches and the verdict out. Its files and how a verdict reads are in
:mod:`rewardloop.monitors.history`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping

# (config key, health statistic, how the iteration's value is compared with the base's)
RISES = (("dark_fraction_rise", "dark_fraction"), ("bright_fraction_rise", "bright_fraction"))
FLOORS = (("colour_entropy_ratio", "colour_entropy"), ("diversity_ratio", "diversity"))
CEILINGS = (("high_frequency_ratio", "high_frequency_energy"),)


@dataclass(frozen=True)
class Breach:
    check: str  # the guard key whose threshold was passed
    value: float
    base: float
    threshold: float
    message: str


def _finite(*values) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def health_breaches(guard: Mapping, base: Mapping[str, float], health: Mapping[str, float]) -> list[Breach]:
    """Breaches of the image-health thresholds (``base`` and ``health``: statistics of the eval images)."""
    found = []
    for key, stat in RISES:
        limit = guard.get(key)
        if limit is not None and _finite(base.get(stat), health.get(stat)) and health[stat] - base[stat] > limit:
            found.append(Breach(key, health[stat], base[stat], limit,
                                f"{stat} rose from {base[stat]:.3f} (base) to {health[stat]:.3f}, by more than {limit}"))
    for key, stat in FLOORS:
        ratio = guard.get(key)
        if ratio is not None and _finite(base.get(stat), health.get(stat)) and health[stat] < ratio * base[stat]:
            found.append(Breach(key, health[stat], base[stat], ratio,
                                f"{stat} fell from {base[stat]:.3f} (base) to {health[stat]:.3f}, "
                                f"below {ratio:g} x the base"))
    for key, stat in CEILINGS:
        ratio = guard.get(key)
        if ratio is not None and _finite(base.get(stat), health.get(stat)) and health[stat] > ratio * max(base[stat], 1e-6):
            found.append(Breach(key, health[stat], base[stat], ratio,
                                f"{stat} rose from {base[stat]:.4f} (base) to {health[stat]:.4f}, "
                                f"above {ratio:g} x the base"))
    return found


def gold_breaches(guard: Mapping, reward: tuple[float, float], gold: Mapping[str, tuple[float, float]]) -> list[Breach]:
    """A gold reward down by more than ``gold_drop`` while the trained reward rose (both on the eval images).

    ``reward`` and each ``gold[name]``: (base mean, iteration mean).
    """
    drop = guard.get("gold_drop")
    if drop is None or not _finite(*reward) or reward[1] <= reward[0]:
        return []
    found = []
    for name, (base, value) in gold.items():
        if _finite(base, value) and value < base - drop:
            found.append(Breach(f"gold_drop ({name})", value, base, drop,
                                f"gold reward {name} fell from {base:.4f} (base) to {value:.4f} while the trained "
                                f"reward rose from {reward[0]:.4f} to {reward[1]:.4f}"))
    return found


def verdict(iteration: int, breaches: list[Breach], stop: bool) -> dict:
    """What guard.json holds."""
    return {"iteration": iteration, "status": "breach" if breaches else "ok", "stop": stop,
            "breaches": [asdict(b) for b in breaches]}

"""Training objectives: one module per objective, registered by name (``train.loss``).

Adding one: a module here with an ``@objective("name")`` subclass of
:class:`~rewardloop.objectives.registry.Objective`, and its import below.
"""

from rewardloop.objectives.registry import (
    OBJECTIVES,
    Objective,
    ObjectiveError,
    TrainingInputs,
    get_objective,
    objective,
)
from rewardloop.objectives import awm, dgpo, dpo, grpo, mixgrpo, nft, sft  # noqa: F401  (imported to register)

__all__ = ["OBJECTIVES", "Objective", "ObjectiveError", "TrainingInputs", "get_objective", "objective"]

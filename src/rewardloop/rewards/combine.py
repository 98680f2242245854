"""Weighted combination of several rewards into one scores table.

The ``rewards`` config maps each reward name to a weight, or to a mapping holding ``weight`` and
the reward's options::

    rewards:
      jpeg_compressibility: 1.0
      ocr: {weight: 2.0, backend: rapidocr}
"""

from __future__ import annotations

import json
import math
import sys
from numbers import Real
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from tqdm import tqdm

from rewardloop.rewards.base import build_reward


def _is_number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def parse_reward_specs(rewards_cfg) -> list[tuple[str, float, dict]]:
    """``[(name, weight, options), ...]`` from the ``rewards`` config mapping, in config order."""
    if not isinstance(rewards_cfg, Mapping) or not rewards_cfg:
        raise ValueError(
            f"'rewards' must be a non-empty mapping of name -> weight, got {rewards_cfg!r}"
        )
    specs = []
    for name, value in rewards_cfg.items():
        key = f"rewards.{name}"
        if not isinstance(name, str):
            raise ValueError(f"'rewards': reward names must be strings, got {name!r}")
        if isinstance(value, Mapping):
            options = dict(value)
            if "weight" not in options:
                raise ValueError(f"'{key}': mapping needs a 'weight' entry, got {value!r}")
            weight = options.pop("weight")
            key += ".weight"
        else:
            weight, options = value, {}
        if not _is_number(weight) or not math.isfinite(weight):
            raise ValueError(f"'{key}': weight must be a finite number, got {weight!r}")
        specs.append((name, float(weight), options))
    return specs


def _jsonable(obj):
    # numpy scalars and arrays in reward details
    return obj.tolist() if hasattr(obj, "tolist") else str(obj)


class RewardSet:
    """Builds each configured reward once; scores images into a table of total and parts."""

    def __init__(self, rewards_cfg):
        self.specs = parse_reward_specs(rewards_cfg)
        self.weights = {name: weight for name, weight, _ in self.specs}
        self.rewards = {name: build_reward(name, **options) for name, _, options in self.specs}

    @property
    def names(self) -> list[str]:
        return list(self.rewards)

    def check_prompts(self, prompts: Sequence[str]) -> None:
        for reward in self.rewards.values():
            reward.check_prompts(prompts)

    def score(self, images: Sequence, prompts: Sequence[str], batch_size: int = 8,
              metadata: Sequence[dict] | None = None) -> pd.DataFrame:
        """Columns ``reward`` (weighted sum), ``reward_<name>`` each, ``reward_details`` (JSON).

        ``metadata``: one JSON object per image (its prompt's metadata, e.g. GenEval's), passed with each
        batch to the rewards whose ``takes_metadata`` is true (remote ones: their server receives it);
        the others ignore it."""
        images, prompts = list(images), list(prompts)
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
        if metadata is not None and len(metadata) != len(images):
            raise ValueError(f"{len(images)} images but {len(metadata)} metadata objects")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.check_prompts(prompts)
        parts = {name: [] for name in self.rewards}
        details = [{} for _ in images]
        starts = range(0, len(images), batch_size)
        for start in tqdm(starts, desc="rewards", unit="batch", file=sys.stderr):
            stop = min(start + batch_size, len(images))
            for name, reward in self.rewards.items():
                if metadata is not None and getattr(reward, "takes_metadata", False):
                    scores, batch_details = reward.score(images[start:stop], prompts[start:stop],
                                                         metadata=list(metadata[start:stop]))
                else:
                    scores, batch_details = reward.score(images[start:stop], prompts[start:stop])
                scores = np.asarray(scores, dtype=np.float64).reshape(-1)
                if len(scores) != stop - start or len(batch_details) != stop - start:
                    raise ValueError(
                        f"reward {name!r} returned {len(scores)} scores and {len(batch_details)} "
                        f"details for a batch of {stop - start} images"
                    )
                bad = np.flatnonzero(~np.isfinite(scores))
                if bad.size:
                    raise ValueError(
                        f"reward {name!r} returned a non-finite score ({scores[bad[0]]}) "
                        f"for sample index {start + bad[0]}"
                    )
                parts[name].append(scores)
                for offset, item in enumerate(batch_details):
                    details[start + offset][name] = item
        columns = {
            f"reward_{name}": np.concatenate(chunks) if chunks else np.zeros(0)
            for name, chunks in parts.items()
        }
        total = sum(self.weights[name] * columns[f"reward_{name}"] for name in self.rewards)
        table = pd.DataFrame({"reward": total, **columns})
        table["reward_details"] = [
            json.dumps(item, sort_keys=True, default=_jsonable) for item in details
        ]
        return table

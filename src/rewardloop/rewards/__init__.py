"""Reward functions; importing this package registers every built-in reward."""

from rewardloop.rewards.base import (
    Reward,
    available_rewards,
    build_reward,
    check_options,
    check_prompts,
    register,
)
from rewardloop.rewards import (  # noqa: F401  (imported to register)
    aesthetic,
    clip_score,
    color_match,
    hpsv2,
    image_reward,
    jpeg,
    ocr,
    pickscore,
    vlm_judge,
)

__all__ = ["Reward", "available_rewards", "build_reward", "check_options", "check_prompts", "register"]

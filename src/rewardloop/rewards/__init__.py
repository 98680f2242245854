"""Reward functions; importing this package registers every built-in reward."""

from rewardloop.rewards.base import Reward, available_rewards, build_reward, check_prompts, register
from rewardloop.rewards import color_match, jpeg, ocr  # noqa: F401  (imported to register)

__all__ = ["Reward", "available_rewards", "build_reward", "check_prompts", "register"]

"""rewardloop: iterative online reward fine-tuning of text-to-image diffusion models."""

__version__ = "0.1.0"

"""Scores to a training signal: preference pairs (DPO/SFT) or group advantages (GRPO/NFT)."""

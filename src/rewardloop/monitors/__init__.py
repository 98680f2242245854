"""Watching a run for reward hacking: image-health statistics of its images, and the guard's thresholds."""

"""The models built here, offline: the tiny builders of each family (sd15, sdxl, sd3, flux), their pretraining
recipe and synthetic captioned images, the offline tokenizers they and the published-layout replicas ship, and
the record that proves a shipped build (builds.py)."""

"""Smoke runs of the recipes without their downloads: tiny stand-ins of the reward models in their
published on-disk formats (standins) and a --configfile overlay that points a recipe at them and at a
tiny replica of its model family, for one short iteration (overlay)."""

"""Seeded generation: DDIM (with log-probs), flow-matching ODE/SDE, step strategies, recorded trajectories."""

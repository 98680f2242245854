"""Training objectives: one module per objective, registered by name."""

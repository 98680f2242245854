"""The training loop: accelerate, adapter, optimizer, accumulation, checkpoint/resume; knows no loss."""

"""How a job runs: warm fork, run lock, GPU slots, accelerate launch, shards, resources."""

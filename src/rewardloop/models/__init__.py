"""Model families, loading, LoRA and full-model export, the published configs and their replicas; the models built
here (the tiny builders, their pretraining data and offline tokenizers) in tiny/."""

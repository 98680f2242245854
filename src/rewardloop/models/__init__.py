"""Model families, loading, LoRA and full-model export, tokenizers, the tiny builders and their synthetic pretraining data."""

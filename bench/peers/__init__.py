"""`bench sft --peers`: the same job run by swiftbox, a plain HF Trainer, ms-swift and LLaMA-Factory."""

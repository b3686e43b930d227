"""Shared pieces of the training pipelines (sft, dpo): model setup, trainer arguments, callbacks
(rich progress, TensorBoard), checkpoints/resume and the loss-curve plot. Thin wrappers over
transformers / PEFT / bitsandbytes; the flow itself reads top to bottom in pipelines/sft.py and dpo.py."""

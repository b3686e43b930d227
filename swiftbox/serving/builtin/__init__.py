"""The built-in engine: transformers models with continuous batching on one device.

backend.py (the `Backend`: chat template, token budget, one Run per request) -> engine.py (the scheduler
thread: admit, prefill, decode, sample) with prefill.py (chunked / packed prefill), sampling.py, adapter_slots.py
(runtime LoRA adapters); textstream.py (tokens -> text with stop strings) and logprobs.py shape its output.
"""

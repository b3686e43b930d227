"""The vLLM engine: plan.py (the `vllm serve` command) and child.py (the child process and the relay)."""

"""Multi-process training: torchrun launch (launch), distributed arguments (args), the per-rank worker (worker)."""

"""Training's host memory inside and between steps: the platform's `release_freed_memory` after every decoder
layer's forward, after its backward, and at every step's end.

On the CPU in trim mode (SWIFTBOX_CPU_MALLOC's default, swiftbox/device/cpu.py) glibc keeps its own thresholds, so
a step's temporaries and the next step's activations reuse heap pages already faulted in; a forward pass's freed
holes (which, left alone, grow as fast as the saved activations: 3.2 GB free beside 3.65 GB in use on the
real-model LoRA job) are handed back only when the resident set passes the run's own peak + a budget (HeapCap).
A layer is the grain because the heap grows layer by layer in forward. Elsewhere the callback is not added.
"""
from __future__ import annotations

from typing import Any

from transformers import TrainerCallback


def decoder_layers(model: Any) -> list:
    """The model's repeated blocks: the modules whose class the model lists in `_no_split_modules` (transformers'
    own list of its decoder layer classes, found through PEFT's wrappers)."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


class ReleaseFreedMemory(TrainerCallback):
    """Hooks `platform.release_freed_memory` onto every decoder layer (forward, and the grad of its output in
    backward) and calls it at every step's end; `released` counts the calls that trimmed."""

    def __init__(self, platform: Any):
        self.platform = platform
        self.released = 0
        self.layers = 0
        self._handles: list = []

    def release(self, start: bool = False) -> None:
        if self.platform.release_freed_memory(start=start):
            self.released += 1

    def _after_forward(self, module: Any, args: Any, output: Any) -> None:
        self.release()
        out = output[0] if isinstance(output, tuple) else output
        if getattr(out, "requires_grad", False):
            out.register_hook(self._after_backward)

    def _after_backward(self, grad: Any) -> None:
        self.release()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.release(start=True)          # the platform takes this run's baseline (CPU: HeapCap)
        if model is not None and not self._handles:
            layers = decoder_layers(model)
            self.layers = len(layers)
            self._handles = [layer.register_forward_hook(self._after_forward) for layer in layers]

    def on_step_end(self, args, state, control, **kwargs):
        self.release()

    def on_train_end(self, args, state, control, **kwargs):
        for handle in self._handles:
            handle.remove()
        self._handles = []


def memory_callbacks(platform: Any) -> list:
    """The callback where the platform's memory set-up releases as training goes (CPU trim mode); none elsewhere."""
    mode = getattr(platform, "malloc_mode", None)
    return [ReleaseFreedMemory(platform)] if mode is not None and mode() == "trim" else []


__all__ = ["ReleaseFreedMemory", "decoder_layers", "memory_callbacks"]

"""Training's CPU thread count: the engine's policy (swiftbox/device/threads.py) applied between optimizer steps.

torch's OpenMP pool has one thread per core and every kernel ends at a barrier that waits for all of them; on a
shared CPU, where other processes hold cores, one descheduled thread stalls its siblings at every matmul. The
policy gives the pool only the cores other processes leave free, re-measured every couple of seconds. Measured on
the real-model LoRA job (docs/benchmarks.md, "Training threads under load"); on an idle box it keeps every core,
so a quiet run is unchanged. `SWIFTBOX_THREADS=auto|N|torch` decides (torch: leave torch's own count alone).

The callback starts the governor at train begin and ticks it at every step begin, on the thread that runs the
model (on a CPU, autograd's backward runs on the calling thread, so one thread count covers forward and backward).
"""
from __future__ import annotations

from typing import Any, Optional

from transformers import TrainerCallback


class ThreadPolicy(TrainerCallback):
    """Applies device/threads.py's ThreadGovernor to a training run; `plan` is the last plan applied."""

    def __init__(self, governor: Any = None):
        self._governor = governor
        self.plan: Optional[Any] = None

    def on_train_begin(self, args, state, control, **kwargs):
        if self._governor is None:
            import torch

            from swiftbox.device.threads import ThreadGovernor

            # the process's own count is the ceiling: a caller that set torch.set_num_threads(1) keeps it
            self._governor = ThreadGovernor(ceiling=torch.get_num_threads())
        self.plan = self._governor.start()

    def on_step_begin(self, args, state, control, **kwargs):
        if self._governor is not None:
            self.plan = self._governor.tick()

    def changes(self) -> int:
        return int(getattr(self._governor, "changes", 0))


def thread_callbacks(platform: Any) -> list:
    """The thread policy's callback where training runs on the CPU's OpenMP pool; none on an accelerator (its
    host threads only feed the device)."""
    if getattr(platform, "device_type", None) != "cpu":
        return []
    from swiftbox.device.threads import check_env

    check_env()          # a bad SWIFTBOX_THREADS is one line, exit 2, before the model loads
    return [ThreadPolicy()]


__all__ = ["ThreadPolicy", "thread_callbacks"]

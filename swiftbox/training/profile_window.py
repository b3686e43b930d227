"""The `profile:` window of a training step, as a Trainer callback (training's own; diagnose/trace_summary.py
reads what it records).

The platform supplies the profiler (torch.profiler with CPU (+ CUDA) activities; torch_npu.profiler with its
experimental config on Ascend); this callback drives it: start at train begin, `step()` after each optimizer
step, stop at train end. It opens `swiftbox::forward` (around the model's forward), `swiftbox::lm_head` (from
the backbone's end, or the head's own forward, to the model's end: TRL's fused head + loss included) and
`swiftbox::optimizer` ranges so the summary can split step time, and measures tokens/s over the recorded steps.
Nothing here touches the computation: hooks only open and close profiler ranges
(tested: same loss with and without).

Output under <out>/profile/: trace/ (Chrome trace JSON: TensorBoard's PyTorch profiler plugin and Perfetto
open it), summary.json and summary.txt.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from swiftbox.artifacts import write_json_atomic
from swiftbox.errors import UserError

if TYPE_CHECKING:
    from swiftbox.contract import StepContext
    from swiftbox.steps import TrainBase


def profile_callbacks(cfg: TrainBase, ctx: StepContext) -> list:
    """[ProfileWindow] when the step has a `profile:` block, else []. Put it first: it refuses a window beyond
    the run's last step before any other callback starts."""
    if getattr(cfg, "profile", None) is None:
        return []
    from swiftbox.training.distributed.ranks import is_main_process

    return [ProfileWindow(cfg.profile, ctx.platform, ctx.work_dir / "profile", ctx.output / "profile",
                          ctx.kind, is_main_process())]


def recorded(settings, index: int) -> bool:
    """Whether the profiler records step `index` (0-based), following torch.profiler.schedule."""
    cycle = settings.wait + settings.warmup + settings.active
    if settings.repeat > 0 and index >= cycle * settings.repeat:
        return False
    return index % cycle >= settings.wait + settings.warmup


class ProfileWindow(TrainerCallback):
    def __init__(self, settings, platform, work_dir: Path, final_dir: Path, kind: str, main: bool):
        self.settings, self.platform, self.kind, self.main = settings, platform, kind, main
        self.dir, self.final_dir = Path(work_dir), Path(final_dir)
        self.prof: Any = None
        self.hooks: list = []
        self.ranges: dict[str, Any] = {}
        self.index = 0
        self.mark = 0.0
        self.tokens_mark = 0
        self.window_seconds = 0.0
        self.window_tokens = 0
        self.summary: dict | None = None

    # -- window ----------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        last = self.settings.last_step()
        remaining = state.max_steps - state.global_step
        if last > remaining:
            raise UserError(f"{self.kind}.profile: the window (wait {self.settings.wait} + warmup "
                            f"{self.settings.warmup} + active {self.settings.active}) x repeat "
                            f"{max(self.settings.repeat, 1)} ends at step {last}, but this run has {remaining} "
                            f"step(s); shorten the window or train longer")
        import torch

        trace_dir = self.dir / "trace"
        trace_dir.mkdir(parents=True, exist_ok=True)
        rank = getattr(args, "process_index", 0)
        self.prof = self.platform.profiler(self.settings, trace_dir, worker=f"rank{rank}")
        if model is not None:
            self.hooks = [model.register_forward_pre_hook(lambda *a: self._open("forward"))]
            # The LM head + loss range runs from the end of the backbone (or the head's own forward, whichever comes
            # first) to the end of the model's forward. TRL's SFT never calls the head module: its fused forward
            # takes the backbone's hidden states and applies the head's weight chunk by chunk inside the loss.
            head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
            if head is not None:
                self.hooks.append(head.register_forward_pre_hook(lambda *a: self._open("lm_head")))
            backbone = _backbone(model)
            if backbone is not None:
                self.hooks.append(backbone.register_forward_hook(lambda *a: self._open("lm_head")))
            self.hooks += [model.register_forward_hook(lambda *a: self._close("lm_head")),
                           model.register_forward_hook(lambda *a: self._close("forward"))]
        self._record_function = torch.profiler.record_function
        self.prof.start()
        self.mark, self.tokens_mark = time.perf_counter(), state.num_input_tokens_seen

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._open("optimizer")

    def on_optimizer_step(self, args, state, control, **kwargs):
        self._close("optimizer")

    def on_step_end(self, args, state, control, **kwargs):
        if self.prof is None:
            return
        if recorded(self.settings, self.index):
            self.window_seconds += time.perf_counter() - self.mark
            self.window_tokens += state.num_input_tokens_seen - self.tokens_mark
        self.prof.step()          # may write a finished cycle's trace: not part of any step's time
        self.index += 1
        self.mark, self.tokens_mark = time.perf_counter(), state.num_input_tokens_seen

    def on_train_end(self, args, state, control, **kwargs):
        if self.prof is None:
            return
        for hook in self.hooks:
            hook.remove()
        for what in list(self.ranges):   # a forward that raised leaves its range open
            self._close(what)
        self.prof.stop()
        self.prof = None
        if self.main:
            self.summary = self.write_summary()

    # -- ranges ----------------------------------------------------------------------------
    def _open(self, what: str) -> None:
        if self.prof is not None and what not in self.ranges:
            rf = self._record_function(f"swiftbox::{what}")
            rf.__enter__()
            self.ranges[what] = rf

    def _close(self, what: str) -> None:
        rf = self.ranges.pop(what, None)
        if rf is not None:
            rf.__exit__(None, None, None)

    # -- summary ---------------------------------------------------------------------------
    def write_summary(self) -> dict:
        from swiftbox.diagnose.trace_summary import render_table, summarize

        traces = self.platform.profiler_traces(self.dir / "trace")
        if not traces:  # training stopped (e.g. by a callback) before the window recorded a step
            summary = {"traces": [], "steps_recorded": 0, "note": "training ended before the window recorded a step"}
            write_json_atomic(self.dir / "summary.json", summary)
            print(f"{self.kind}: profile: {summary['note']}", file=sys.stderr, flush=True)
            return summary
        summary = summarize(traces)
        summary["traces"] = [str(self.final_dir / Path(t).relative_to(self.dir)) for t in traces]
        summary.update(
            device=self.platform.name,
            window={k: getattr(self.settings, k) for k in ("wait", "warmup", "active", "repeat")},
            window_seconds=round(self.window_seconds, 4),
            window_tokens=int(self.window_tokens),
            tokens_per_second=round(self.window_tokens / self.window_seconds, 1) if self.window_seconds else None,
            peak_memory_bytes_process=self.platform.max_memory_allocated(),
        )
        table = render_table(summary)
        write_json_atomic(self.dir / "summary.json", summary)
        (self.dir / "summary.txt").write_text(table + "\n")
        print(table, file=sys.stderr)
        print(f"{self.kind}: profile written to {self.final_dir} (summary.txt; open trace/ in TensorBoard "
              f"or Perfetto)", file=sys.stderr, flush=True)
        return summary


def _backbone(model: Any) -> Any:
    """The decoder stack whose hidden states feed the LM head (inside a PEFT wrapper too), or None."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    backbone = getattr(inner, "base_model", None)
    return backbone if backbone is not None and backbone is not inner and hasattr(backbone, "register_forward_hook") \
        else None

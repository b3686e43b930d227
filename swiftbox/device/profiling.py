"""Profilers for a training window, one per backend: torch.profiler (CPU, + CUDA activities) and
torch_npu.profiler with its `_ExperimentalConfig` on Ascend (written against its documented API:
`torch_npu.profiler.profile(activities, schedule, on_trace_ready, record_shapes, profile_memory, with_stack,
experimental_config)`, `ProfilerLevel.Level0..2`, `AiCMetrics.*`, `tensorboard_trace_handler(dir, worker)`).

`settings` is the step's `profile:` block (wait, warmup, active, repeat, record_shapes, profile_memory,
with_stack, level, aic_metrics, l2_cache). Every profiler returned has start() / step() / stop(), the
torch.profiler.profile protocol. Traces are Chrome trace event JSON files that TensorBoard's PyTorch
profiler plugin (torch-tb-profiler) and Perfetto open.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

# the `profile.level` / `profile.aic_metrics` values -> attribute names in torch_npu.profiler
ASCEND_LEVELS = {"level_none": "Level_none", "level0": "Level0", "level1": "Level1", "level2": "Level2"}
ASCEND_AIC_METRICS = {
    "none": "AiCoreNone", "pipe_utilization": "PipeUtilization", "arithmetic_utilization": "ArithmeticUtilization",
    "memory": "Memory", "memory_l0": "MemoryL0", "memory_ub": "MemoryUB",
    "resource_conflict_ratio": "ResourceConflictRatio", "l2_cache": "L2Cache",
}


def torch_profiler(activity_names: tuple[str, ...], settings: Any, trace_dir: Path, worker: str) -> Any:
    """torch.profiler.profile over the window; each finished cycle writes <worker>.<ts>.pt.trace.json."""
    import torch

    activities = [getattr(torch.profiler.ProfilerActivity, name) for name in activity_names]
    return torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=settings.wait, warmup=settings.warmup, active=settings.active,
                                         repeat=settings.repeat),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(trace_dir), worker_name=worker),
        record_shapes=settings.record_shapes,
        profile_memory=settings.profile_memory,
        with_stack=settings.with_stack,
    )


def torch_traces(trace_dir: Path) -> list[Path]:
    return sorted(Path(trace_dir).glob("*.pt.trace.json*"))


def ascend_profiler(settings: Any, trace_dir: Path, worker: str) -> Any:
    """torch_npu.profiler.profile with CPU + NPU activities and the Ascend experimental config
    (profiler level, AI Core metrics, L2 cache). The handler writes <dir>/<worker>_<ts>_ascend_pt/."""
    import torch_npu

    prof = torch_npu.profiler
    experimental = prof._ExperimentalConfig(
        profiler_level=getattr(prof.ProfilerLevel, ASCEND_LEVELS[settings.level]),
        aic_metrics=getattr(prof.AiCMetrics, ASCEND_AIC_METRICS[settings.aic_metrics]),
        l2_cache=settings.l2_cache,
    )
    return prof.profile(
        activities=[prof.ProfilerActivity.CPU, prof.ProfilerActivity.NPU],
        schedule=prof.schedule(wait=settings.wait, warmup=settings.warmup, active=settings.active,
                               repeat=settings.repeat),
        on_trace_ready=prof.tensorboard_trace_handler(str(trace_dir), worker_name=worker),
        record_shapes=settings.record_shapes,
        profile_memory=settings.profile_memory,
        with_stack=settings.with_stack,
        experimental_config=experimental,
    )


def ascend_traces(trace_dir: Path) -> list[Path]:
    """The Chrome trace the Ascend analysis writes for each cycle (also opened by MindStudio Insight)."""
    return sorted(Path(trace_dir).glob("*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"))

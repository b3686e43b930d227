"""Summarise profiler traces (Chrome trace event format, as torch.profiler and torch_npu write them).

Reads the `ph: "X"` (complete) events of the recorded steps and reports:
- the share of step time spent in data wait / forward / backward / optimizer / other. Time is assigned in
  that order of precedence, so a moment counts once and the shares add up to 1 by construction;
- the top operators by self time (an op's duration minus that of the ops nested directly inside it);
- the peak of the `[memory]` counters (when the window tracked memory).

Phase markers: `ProfilerStep#N` (the profiler's own step ranges), `enumerate(DataLoader)#...` (torch's data
loader), `swiftbox::forward` / `swiftbox::optimizer` (ranges our callback opens), `Optimizer.step#...`
(torch.optim) and `autograd::engine::evaluate_function: ...` (autograd's backward nodes).
"""
from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Iterable

from swiftbox.errors import UserError

PHASES = ("data_wait", "lm_head_loss", "forward", "backward", "optimizer")   # earlier phases claim time first
# the LM head's forward (the `swiftbox::lm_head` range) and the loss over the vocabulary, both directions (its
# backward matmuls are not told apart from the other layers' and stay in `backward`)
LOSS_OPS = ("aten::cross_entropy_loss", "aten::log_softmax", "aten::_log_softmax", "aten::nll_loss_nd",
            "aten::nll_loss", "aten::logsumexp")
# (TRL's fused head + loss: its chunked log-prob function, head and loss in one autograd node)
LOSS_GRADS = ("LogSoftmaxBackward", "NllLossBackward", "LogsumexpBackward", "ChunkedLogProbFunctionBackward")
STEP_RE = re.compile(r"^ProfilerStep#\d+$")
Interval = tuple[float, float]


def load_events(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError, EOFError) as exc:
        raise UserError(f"{path}: not a readable Chrome trace ({exc})") from None
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise UserError(f"{path}: no traceEvents list; expected the Chrome trace event format")
    return events


def phase_of(name: str) -> str | None:
    if name.startswith("enumerate(DataLoader)"):
        return "data_wait"
    if name == "swiftbox::lm_head" or name in LOSS_OPS:
        return "lm_head_loss"
    if name == "swiftbox::forward":
        return "forward"
    if name.startswith("autograd::engine::evaluate_function"):
        return "lm_head_loss" if any(g in name for g in LOSS_GRADS) else "backward"
    if name == "swiftbox::optimizer" or name.startswith("Optimizer.step#"):
        return "optimizer"
    return None


def union(intervals: Iterable[Interval]) -> list[Interval]:
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Intersection of two sorted disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """a minus b, both sorted and disjoint."""
    out = []
    for start, end in a:
        cur = start
        for lo, hi in b:
            if hi <= cur or lo >= end:
                continue
            if lo > cur:
                out.append((cur, lo))
            cur = max(cur, hi)
        if cur < end:
            out.append((cur, end))
    return out


def length(intervals: Iterable[Interval]) -> float:
    return sum(end - start for start, end in intervals)


def phase_times(events: list[dict]) -> tuple[list[Interval], dict[str, float]]:
    """Recorded step intervals and the microseconds of each phase (plus `other`) inside them."""
    steps = union((e["ts"], e["ts"] + e["dur"]) for e in events if STEP_RE.match(str(e.get("name", ""))))
    by_phase: dict[str, list[Interval]] = defaultdict(list)
    for e in events:
        phase = phase_of(str(e.get("name", "")))
        if phase:
            by_phase[phase].append((e["ts"], e["ts"] + e["dur"]))
    times: dict[str, float] = {}
    claimed: list[Interval] = []
    for phase in PHASES:
        mine = subtract(intersect(union(by_phase[phase]), steps), claimed)
        times[phase] = length(mine)
        claimed = union(claimed + mine)
    times["other"] = length(steps) - length(claimed)
    return steps, times


def op_self_times(events: list[dict], category: str = "cpu_op") -> dict[str, dict]:
    """Per operator name: calls, total and self microseconds (self = minus directly nested ops, per thread)."""
    stats: dict[str, dict] = defaultdict(lambda: {"calls": 0, "total_us": 0.0, "self_us": 0.0})
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("cat") == category:
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for ops in by_thread.values():
        ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[list] = []  # [end, name, self_us]

        def close(entry):
            stats[entry[1]]["self_us"] += max(entry[2], 0.0)

        for e in ops:
            start, end = e["ts"], e["ts"] + e["dur"]
            while stack and stack[-1][0] <= start:
                close(stack.pop())
            if stack:
                stack[-1][2] -= e["dur"]
            s = stats[e["name"]]
            s["calls"] += 1
            s["total_us"] += e["dur"]
            stack.append([end, e["name"], float(e["dur"])])
        while stack:
            close(stack.pop())
    return dict(stats)


def peak_memory(events: list[dict]) -> int | None:
    peaks = [e.get("args", {}).get("Total Allocated") for e in events if e.get("name") == "[memory]"]
    peaks = [p for p in peaks if isinstance(p, (int, float))]
    return int(max(peaks)) if peaks else None


def summarize(paths: list[Path], *, top: int = 15) -> dict:
    """The summary of one or more traces (one per profiled cycle)."""
    if not paths:
        raise UserError("profile: the profiler wrote no trace; is the window inside the run?")
    steps_us, phase_us = 0.0, dict.fromkeys((*PHASES, "other"), 0.0)
    ops: dict[str, dict] = defaultdict(lambda: {"calls": 0, "total_us": 0.0, "self_us": 0.0})
    n_steps, peaks = 0, []
    for path in paths:
        raw = load_events(path)
        events = [e for e in raw if e.get("ph") == "X" and "dur" in e and "ts" in e]
        steps, times = phase_times(events)
        n_steps += sum(1 for e in events if STEP_RE.match(str(e.get("name", ""))))
        steps_us += length(steps)
        for key, value in times.items():
            phase_us[key] += value
        for name, s in op_self_times(events).items():
            for key in ("calls", "total_us", "self_us"):
                ops[name][key] += s[key]
        peaks.append(peak_memory(raw))
    total_self = sum(s["self_us"] for s in ops.values()) or 1.0
    ranked = sorted(ops.items(), key=lambda kv: -kv[1]["self_us"])[:top]
    known = [p for p in peaks if p is not None]
    return {
        "traces": [str(p) for p in paths],
        "steps_recorded": n_steps,
        "step_ms_mean": round(steps_us / max(n_steps, 1) / 1e3, 3),
        "phase_ms": {k: round(v / 1e3, 3) for k, v in phase_us.items()},
        "phase_share": {k: (v / steps_us if steps_us else 0.0) for k, v in phase_us.items()},
        "top_ops": [{"name": name, "calls": s["calls"], "self_ms": round(s["self_us"] / 1e3, 3),
                     "total_ms": round(s["total_us"] / 1e3, 3), "self_share": round(s["self_us"] / total_self, 4)}
                    for name, s in ranked],
        "peak_memory_bytes_traced": max(known) if known else None,
    }


def render_table(summary: dict) -> str:
    """A plain-text table of a summary (what summary.txt holds and the run prints)."""
    lines = [f"profile: {summary['steps_recorded']} step(s) recorded, {summary['step_ms_mean']:.1f} ms per step"
             + (f", {summary['tokens_per_second']:.1f} tokens/s in the window" if summary.get("tokens_per_second")
                else "")]
    lines.append("  share of step time: " + "  ".join(
        f"{k} {100 * v:.1f}%" for k, v in summary["phase_share"].items()))
    peak = summary.get("peak_memory_bytes_traced")
    process = summary.get("peak_memory_bytes_process")
    lines.append(f"  peak memory: traced {_mib(peak)}, process {_mib(process)}")
    lines.append(f"  {'top ops by self time':<48} {'calls':>7} {'self ms':>10} {'total ms':>10} {'self %':>7}")
    for op in summary["top_ops"]:
        name = op["name"] if len(op["name"]) <= 48 else op["name"][:45] + "..."
        lines.append(f"  {name:<48} {op['calls']:>7} {op['self_ms']:>10.2f} {op['total_ms']:>10.2f} "
                     f"{100 * op['self_share']:>6.1f}%")
    return "\n".join(lines)


def _mib(value) -> str:
    return "n/a" if value is None else f"{value / 2**20:.1f} MiB"

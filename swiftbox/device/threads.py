"""How many threads torch's CPU (OpenMP) pool gets: one policy for the built-in engine and training, from the cores
this process may run on and how much of them other processes keep busy, re-checked while it runs.

Why: torch starts one OpenMP thread per core and every parallel region ends at a barrier that waits for all of
them. When other processes hold the cores (a shared box at load 5 on 2 cores), one of our threads is descheduled
and its siblings wait for its next time slice at every matmul: the built-in engine fell to 0.19x / 0.04x of
vLLM-CPU there (docs/benchmarks.md, "Thread policy"). So the pool gets only the cores others leave free:

    threads = clamp(round(cores - others), 1, cores)

`cores`: the CPUs this process may run on (`os.sched_getaffinity`); `others`: how many of those cores other
processes kept busy over the last window - the busy time in /proc/stat for those CPUs (steal included: the
hypervisor's) minus this process's own CPU time. Measured, not guessed from the load average, which counts our
own threads and lags a minute behind.

`SWIFTBOX_THREADS` decides: `auto` (the default: the rule above, re-checked every `WINDOW_S` seconds between two
engine steps), a number (that many, fixed), or `torch` (leave torch's own choice alone). An `OMP_NUM_THREADS`
the user set is honoured as a fixed count. A bad value is a UserError (one line, exit 2).

`torch.set_num_threads` sets the OpenMP thread count of the calling thread only (ATen applies the process-wide
number lazily, once per thread), so `ThreadGovernor.tick` must run on the thread that runs the model.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from swiftbox.errors import UserError

ENV = "SWIFTBOX_THREADS"
WINDOW_S = 2.0           # how often `auto` re-measures (seconds of wall time, checked between steps)
FIRST_LOOK_S = 0.5       # the first measurement, when the governor is made
PROC_STAT = "/proc/stat"


@dataclass(frozen=True)
class ThreadPlan:
    """What the policy chose and why (`line()` is what a header prints)."""

    threads: Optional[int]          # None: torch's own choice is left alone
    cores: int
    mode: str                       # "auto" | "fixed" | "torch"
    source: str                     # where the choice came from: "auto", "SWIFTBOX_THREADS=2", "OMP_NUM_THREADS=1"
    others: Optional[float] = None  # cores other processes kept busy (auto, once measured)

    def line(self) -> str:
        if self.mode == "torch":
            return f"threads: torch's own ({self.source}; {self.cores} cores)"
        if self.mode == "fixed":
            return f"threads: {self.threads} of {self.cores} cores ({self.source})"
        seen = "not measured yet" if self.others is None else f"other processes keep {self.others:.1f} busy"
        return (f"threads: {self.threads} of {self.cores} cores (auto: {seen}; re-checked every {WINDOW_S:g} s; "
                f"{ENV}=N fixes it)")


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def auto_threads(cores: int, others: Optional[float]) -> int:
    """The rule: the cores other processes leave free, rounded, at least one, at most `cores`."""
    if others is None:
        return cores
    return max(1, min(cores, int(cores - others + 0.5)))


def plan(cores: int, others: Optional[float] = None, environ: Optional[Mapping[str, str]] = None) -> ThreadPlan:
    """The thread plan for `cores` usable cores while other processes keep `others` of them busy."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV, "")
    mode = raw.strip().lower() or "auto"
    if mode == "torch":
        return ThreadPlan(None, cores, "torch", f"{ENV}=torch")
    if mode != "auto":
        return ThreadPlan(_count(ENV, raw), cores, "fixed", f"{ENV}={raw.strip()}")
    omp = env.get("OMP_NUM_THREADS", "").strip()
    if omp:
        return ThreadPlan(_count("OMP_NUM_THREADS", omp), cores, "fixed", f"OMP_NUM_THREADS={omp}")
    return ThreadPlan(auto_threads(cores, others), cores, "auto", "auto", others)


def _count(name: str, raw: str) -> int:
    try:
        n = int(raw.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise UserError(f"{name}: expected auto, torch or a number of threads (1 or more), got {raw!r}")
    return n


def check_env(environ: Optional[Mapping[str, str]] = None) -> None:
    """Refuse a bad SWIFTBOX_THREADS / OMP_NUM_THREADS before anything loads (UserError)."""
    plan(available_cores(), None, environ)


# -- measuring the others ------------------------------------------------------------------------------------
def _busy_ticks(cpus: set[int], stat: Optional[str] = None) -> Optional[int]:
    """Busy clock ticks (everything but idle and iowait) summed over `cpus`, from /proc/stat text; None off Linux."""
    if stat is None:
        try:
            with open(PROC_STAT, encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            return None
    total, seen = 0, False
    for line in stat.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or not name[3:].isdigit() or int(name[3:]) not in cpus:
            continue
        fields = [int(x) for x in rest.split()]
        # user nice system idle iowait irq softirq steal [guest guest_nice: already inside user/nice]
        total += sum(fields[:8]) - fields[3] - fields[4]
        seen = True
    return total if seen else None


def others_busy(busy_s: float, own_s: float, wall_s: float) -> float:
    """Cores other processes kept busy: the CPUs' busy seconds less ours, per second of wall time (>= 0)."""
    if wall_s <= 0:
        return 0.0
    return max(0.0, (busy_s - own_s) / wall_s)


class LoadProbe:
    """Samples how many of this process's cores other processes keep busy, window by window."""

    def __init__(self, read_stat: Callable[[], Optional[str]] | None = None, cpus: Optional[set[int]] = None):
        if cpus is None:
            try:
                cpus = set(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                cpus = set(range(os.cpu_count() or 1))
        self.cpus = cpus
        self._read = read_stat
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last = self._sample()

    def _sample(self) -> tuple[float, Optional[int], float]:
        times = os.times()
        stat = self._read() if self._read is not None else None
        return time.monotonic(), _busy_ticks(self.cpus, stat), times.user + times.system

    def others(self) -> Optional[float]:
        """Cores others kept busy since the last call (None where /proc/stat cannot be read)."""
        now = self._sample()
        (t0, b0, o0), (t1, b1, o1) = self._last, now
        self._last = now
        if b0 is None or b1 is None:
            return None
        return others_busy((b1 - b0) / self._tick, o1 - o0, t1 - t0)


class ThreadGovernor:
    """Applies the plan on the thread that runs the model: `start()` once there, then `tick()` between steps."""

    def __init__(self, environ: Optional[Mapping[str, str]] = None, probe: Optional[LoadProbe] = None,
                 set_threads: Optional[Callable[[int], None]] = None, window_s: float = WINDOW_S,
                 ceiling: Optional[int] = None):
        """`ceiling`: never more threads than this (training passes the count the process already had, so a
        caller's own `torch.set_num_threads(1)` stands; the policy only takes cores away under load)."""
        self.environ = dict(os.environ if environ is None else environ)
        cores = available_cores() if ceiling is None else max(1, min(available_cores(), ceiling))
        self.current = plan(cores, None, self.environ)
        if self.current.mode == "auto" and probe is None:   # a first look (half a second) for the header's figure
            probe = LoadProbe()
            time.sleep(FIRST_LOOK_S)
            self.current = plan(self.current.cores, probe.others(), self.environ)
        self._probe = probe
        self._set = set_threads
        self._window = window_s
        self._due = 0.0
        self.changes = 0

    def start(self) -> ThreadPlan:
        self._apply(self.current.threads)
        self._due = time.monotonic() + self._window
        return self.current

    def tick(self) -> ThreadPlan:
        """Re-measure once a window has passed (auto only); re-sizes the pool when the answer changes."""
        if self.current.mode != "auto" or self._probe is None or time.monotonic() < self._due:
            return self.current
        self._due = time.monotonic() + self._window
        others = self._probe.others()
        if others is None:
            return self.current
        new = plan(self.current.cores, others, self.environ)
        if new.threads != self.current.threads:
            self._apply(new.threads)
            self.changes += 1
        self.current = new
        return new

    def _apply(self, threads: Optional[int]) -> None:
        if threads is None:
            return
        if self._set is not None:
            self._set(threads)
            return
        import torch

        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)

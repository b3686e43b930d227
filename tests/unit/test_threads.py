"""The CPU thread policy (swiftbox/device/threads.py): the count from the cores and how busy other processes keep
them, the overrides, /proc/stat read per CPU, and the governor re-sizing torch's pool on the thread that runs the
model."""
from __future__ import annotations

import threading

import pytest

from swiftbox.device import threads as th
from swiftbox.errors import UserError


@pytest.mark.parametrize("cores,others,want", [
    (2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.6, 1), (2, 5.0, 1),   # a loaded 2-core box gets one thread
    (16, 3.2, 13), (16, 0.0, 16), (1, 0.0, 1), (4, None, 4),
])
def test_auto_threads_leave_the_busy_cores_to_the_others(cores, others, want):
    assert th.auto_threads(cores, others) == want


def test_overrides_and_their_order():
    assert th.plan(2, 1.8, {}).threads == 1
    fixed = th.plan(2, 1.8, {"SWIFTBOX_THREADS": "2"})
    assert (fixed.threads, fixed.mode, fixed.source) == (2, "fixed", "SWIFTBOX_THREADS=2")
    omp = th.plan(2, 0.0, {"OMP_NUM_THREADS": "1"})
    assert (omp.threads, omp.mode, omp.source) == (1, "fixed", "OMP_NUM_THREADS=1")
    assert th.plan(2, 0.0, {"OMP_NUM_THREADS": "1", "SWIFTBOX_THREADS": "2"}).threads == 2   # ours decides
    assert th.plan(2, 0.0, {"OMP_NUM_THREADS": "1", "SWIFTBOX_THREADS": "auto"}).threads == 1
    torch_own = th.plan(2, 1.8, {"SWIFTBOX_THREADS": "torch"})
    assert torch_own.threads is None and torch_own.mode == "torch"
    for bad in ("0", "two", "-1"):
        with pytest.raises(UserError, match="SWIFTBOX_THREADS: expected auto, torch or a number"):
            th.plan(2, 0.0, {"SWIFTBOX_THREADS": bad})
    with pytest.raises(UserError, match="OMP_NUM_THREADS"):
        th.check_env({"OMP_NUM_THREADS": "x"})


def test_header_lines_name_the_choice_and_the_override():
    auto = th.plan(2, 1.62, {}).line()
    assert auto.startswith("threads: 1 of 2 cores (auto: other processes keep 1.6 busy")
    assert "SWIFTBOX_THREADS=N" in auto
    assert th.plan(2, None, {}).line().startswith("threads: 2 of 2 cores (auto: not measured yet")
    assert th.plan(8, None, {"SWIFTBOX_THREADS": "3"}).line() == "threads: 3 of 8 cores (SWIFTBOX_THREADS=3)"
    assert "torch's own" in th.plan(8, None, {"SWIFTBOX_THREADS": "torch"}).line()


STAT = """cpu  300 0 100 600 10 0 0 50 0 0
cpu0 100 0 50 300 5 0 0 20 7 0
cpu1 200 0 50 300 5 0 0 30 0 0
intr 12345
"""


def test_busy_ticks_count_only_this_process_cpus_with_steal():
    assert th._busy_ticks({0}, STAT) == 100 + 50 + 20          # idle and iowait left out; steal counted
    assert th._busy_ticks({0, 1}, STAT) == 170 + 280
    assert th._busy_ticks({5}, STAT) is None
    assert th.others_busy(busy_s=3.0, own_s=1.0, wall_s=2.0) == 1.0
    assert th.others_busy(busy_s=1.0, own_s=1.5, wall_s=2.0) == 0.0   # clock granularity: never below 0
    assert th.others_busy(1.0, 0.0, 0.0) == 0.0


def test_load_probe_reads_proc_stat_deltas():
    texts = iter([STAT, STAT.replace("cpu0 100 0 50", "cpu0 400 0 50")])
    probe = th.LoadProbe(read_stat=lambda: next(texts), cpus={0})
    others = probe.others()
    assert others is not None and others > 0     # 300 ticks of others' work in a short window
    assert th.LoadProbe(read_stat=lambda: "", cpus={0}).others() is None    # no /proc/stat: no figure


class FakeProbe:
    def __init__(self, values):
        self.values = list(values)

    def others(self):
        return self.values.pop(0)


def test_governor_resizes_only_when_the_answer_changes(monkeypatch):
    monkeypatch.setattr(th, "available_cores", lambda: 2)
    calls: list[int] = []
    gov = th.ThreadGovernor(environ={}, probe=FakeProbe([1.8, 1.7, 0.1]), set_threads=calls.append, window_s=0.0)
    assert gov.start().threads == 2 and calls == [2]          # no measurement yet: every core
    assert gov.tick().threads == 1 and calls == [2, 1]
    assert gov.tick().threads == 1 and calls == [2, 1]        # same answer: the pool is left alone
    assert gov.tick().threads == 2 and calls == [2, 1, 2]
    assert gov.changes == 2 and gov.current.others == 0.1


def test_governor_waits_a_window_and_fixed_counts_never_probe(monkeypatch):
    monkeypatch.setattr(th, "available_cores", lambda: 2)
    calls: list[int] = []
    gov = th.ThreadGovernor(environ={}, probe=FakeProbe([1.8]), set_threads=calls.append, window_s=3600)
    gov.start()
    assert gov.tick().threads == 2 and calls == [2]           # the window has not passed
    fixed = th.ThreadGovernor(environ={"SWIFTBOX_THREADS": "1"}, probe=FakeProbe([]), set_threads=calls.append,
                              window_s=0.0)
    fixed.start()
    assert fixed.tick().threads == 1 and calls == [2, 1]      # FakeProbe([]) would raise if asked
    own = th.ThreadGovernor(environ={"SWIFTBOX_THREADS": "torch"}, set_threads=calls.append)
    own.start()
    assert own.tick().threads is None and calls == [2, 1]


def test_governor_sets_torch_threads_on_its_own_thread():
    import torch

    seen: dict = {}

    def engine_thread():
        before = torch.get_num_threads()
        gov = th.ThreadGovernor(environ={"SWIFTBOX_THREADS": "1"})
        gov.start()
        seen["inside"] = torch.get_num_threads()
        torch.set_num_threads(before)     # the process-wide default other threads start from

    worker = threading.Thread(target=engine_thread)
    worker.start()
    worker.join()
    assert seen["inside"] == 1

"""Training's CPU thread policy (swiftbox/training/thread_policy.py): the engine's governor is started at train
begin and re-checked at every step begin, only on the CPU, and a bad SWIFTBOX_THREADS is refused before loading."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from swiftbox.device.threads import ThreadGovernor
from swiftbox.errors import UserError
from swiftbox.training.thread_policy import ThreadPolicy, thread_callbacks


class Probe:
    """Others' busy cores, one figure per measurement."""

    def __init__(self, figures):
        self.figures = list(figures)

    def others(self):
        return self.figures.pop(0)


def test_the_pool_follows_the_free_cores_step_by_step(monkeypatch):
    monkeypatch.setattr("swiftbox.device.threads.available_cores", lambda: 2)
    applied = []
    governor = ThreadGovernor(environ={}, probe=Probe([1.6, 0.1]), set_threads=applied.append, window_s=0.0)
    policy = ThreadPolicy(governor)
    state = SimpleNamespace(global_step=0)
    policy.on_train_begin(None, state, None)
    assert applied == [2]                       # no figure yet: every core
    policy.on_step_begin(None, state, None)     # others keep 1.6 of 2 cores busy: one thread
    policy.on_step_begin(None, state, None)     # the box frees up: both again
    assert applied == [2, 1, 2] and policy.changes() == 2 and policy.plan.threads == 2


def test_a_fixed_count_is_applied_once(monkeypatch):
    applied = []
    governor = ThreadGovernor(environ={"SWIFTBOX_THREADS": "1"}, set_threads=applied.append, window_s=0.0)
    policy = ThreadPolicy(governor)
    policy.on_train_begin(None, None, None)
    for _ in range(3):
        policy.on_step_begin(None, None, None)
    assert applied == [1] and policy.plan.mode == "fixed"


def test_only_the_cpu_gets_the_policy_and_bad_values_are_refused(monkeypatch):
    monkeypatch.delenv("SWIFTBOX_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert [type(c) for c in thread_callbacks(SimpleNamespace(device_type="cpu"))] == [ThreadPolicy]
    assert thread_callbacks(SimpleNamespace(device_type="accelerator")) == []
    monkeypatch.setenv("SWIFTBOX_THREADS", "lots")
    with pytest.raises(UserError, match="SWIFTBOX_THREADS"):
        thread_callbacks(SimpleNamespace(device_type="cpu"))


def test_the_process_count_is_the_ceiling(monkeypatch):
    """A caller's own torch.set_num_threads(1) stands: training's policy takes cores away under load, never adds."""
    import torch

    monkeypatch.setattr("swiftbox.device.threads.available_cores", lambda: 2)
    monkeypatch.setattr("swiftbox.device.threads.LoadProbe", lambda: Probe([0.0, 0.0]))
    monkeypatch.setattr("swiftbox.device.threads.FIRST_LOOK_S", 0.0)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = ThreadPolicy()
        policy.on_train_begin(None, SimpleNamespace(global_step=0), None)   # an idle box: still one thread
        assert policy.plan.threads == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert ThreadGovernor(environ={}, probe=Probe([]), set_threads=lambda n: None, ceiling=8).current.cores <= 2

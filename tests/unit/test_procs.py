"""Every process swiftbox starts dies with its parent (issue 43, class 9): a parent stopped by SIGTERM (a `timeout`,
a CI limit) stops its children's whole process groups on the way out, and a parent killed outright (SIGKILL, the
OOM killer: no cleanup code runs) takes them along through the kernel's parent-death signal. Before, each child sat
in its own session and outlived the parent for as long as nobody killed it by hand."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc are Linux's")

PARENT = """
import sys, time
from swiftbox import procs
procs.exit_on_signals()
sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
group = ["sh", "-c", "sleep 600 & wait"]                 # a grandchild in the child's process group
kids = [procs.start(sleeper), procs.start(group)]
time.sleep(0.5)
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def group_members(pgid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                out.append(int(entry))
    return out


def start_parent():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env,
                              start_new_session=True)
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(running(p) for p in pids), pids
    members = group_members(pids[1])
    assert len(members) == 2, members                   # sh and its sleep
    return parent, pids, members


def gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if running(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if running(p)]


def test_sigterm_to_the_parent_stops_every_child_and_its_group():
    parent, pids, members = start_parent()
    try:
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) == 128 + signal.SIGTERM
        assert gone_within([*pids, *members], 10) == []
    finally:
        for pid in [*pids, *members]:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigkill_to_the_parent_still_takes_the_children_along():
    parent, pids, members = start_parent()
    try:
        parent.kill()
        parent.wait(timeout=30)
        assert gone_within(pids, 10) == []               # the kernel's parent-death signal: no parent code ran
    finally:
        for pid in [*pids, *members]:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_stop_ends_the_group_and_unregisters():
    from swiftbox import procs

    child = procs.start(["sh", "-c", "sleep 600 & wait"])
    time.sleep(0.3)
    members = group_members(child.pid)
    assert len(members) == 2 and child in procs.alive()
    procs.stop(child, grace=5)
    assert gone_within(members, 5) == [] and child not in procs.alive()
    with pytest.raises(TypeError, match="preexec_fn"):
        procs.start(["true"], preexec_fn=lambda: None)


LAUNCHER = """
import os, signal, sys
# a terminal's foreground process: Ctrl-C raises KeyboardInterrupt, SIGTERM kills - whatever the test runner's
# process left ignored (an ignored signal is inherited across exec, and Python then keeps ignoring SIGINT)
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from swiftbox.training.distributed.launch import run_and_tee
run_and_tee(["sh", "-c", "echo torchrun $$; sleep 600 & wait"], dict(os.environ))   # a torchrun stand-in and its worker
"""


def start_launcher():
    """A parent running distributed training's launcher (training/distributed/launch.py), its torchrun stand-in's
    pid (read off the launcher's tee of its output) and the stand-in's process group (it and its 'worker')."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", LAUNCHER], stderr=subprocess.PIPE, text=True, env=env,
                              start_new_session=True)
    assert parent.stderr is not None
    line = parent.stderr.readline()
    assert line.startswith("torchrun "), line
    torchrun = int(line.split()[1])
    time.sleep(0.3)
    members = group_members(torchrun)
    assert torchrun in members and len(members) == 2, members
    return parent, torchrun, members


def test_torchrun_dies_with_a_killed_launcher():
    parent, torchrun, members = start_launcher()
    try:
        parent.kill()
        parent.wait(timeout=30)
        assert gone_within([torchrun], 10) == []        # torchrun itself then stops its workers (SIGTERM)
    finally:
        for pid in members:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_ctrl_c_in_the_launcher_stops_torchrun_and_its_workers():
    parent, torchrun, members = start_launcher()
    try:
        parent.send_signal(signal.SIGINT)               # KeyboardInterrupt in the launcher, only there (own session)
        parent.wait(timeout=60)
        assert gone_within(members, 10) == []
    finally:
        for pid in members:
            if running(pid):
                os.kill(pid, signal.SIGKILL)

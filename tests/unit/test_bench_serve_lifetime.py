"""`bench serve` ends cleanly (issue 43, classes 7 and 9): a bad flag is one line and exit 2 (not a traceback from
asyncio.Semaphore(-1)), and a run stopped by SIGTERM - a `timeout`, a CI limit - leaves none of the servers it
started running (before, each sat in its own session until killed by hand)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.unit.test_procs import gone_within, running

BENCH = str(ROOT / "bench" / "serve.py")


def _env(tmp_path) -> dict:
    return {**os.environ, "SWIFTBOX_CACHE": str(tmp_path / "cache"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


@pytest.mark.parametrize("flags, named", [(["--concurrency", "-1"], "--concurrency: -1 must be greater than 0"),
                                          (["--requests", "0"], "--requests: 0 must be greater than 0"),
                                          (["--rounds", "x"], "--rounds: 'x' is not a number"),
                                          (["--ts-timeout", "-5"], "--ts-timeout: -5 must be greater than 0")])
def test_a_bad_flag_is_one_line_exit_2(flags, named, tmp_path):
    res = subprocess.run([sys.executable, BENCH, *flags], capture_output=True, text=True, timeout=120,
                         env=_env(tmp_path))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and named in lines[0], res.stderr[-1500:]
    assert lines[0].startswith("bench serve: error: argument ")


def _descendants(root: int) -> set[int]:
    """Every process whose parent chain or session leads to `root`'s children (they start their own sessions)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                found.add(child)
                todo.append(child)
    return found


@pytest.mark.slow
def test_sigterm_mid_run_leaves_no_server_behind(tmp_path):
    cmd = [sys.executable, BENCH, "--layers", "1", "--requests", "2", "--concurrency", "2", "--rounds", "50",
           "--no-transformers-serve", "--no-bf16", "--threads", "1"]
    bench = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
                             start_new_session=True)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and bench.poll() is None:   # the server and the generate loop are up
            seen |= _descendants(bench.pid)
            if len(seen) >= 2:
                break
            time.sleep(1)
        assert bench.poll() is None and len(seen) >= 2, (seen, bench.stderr.read()[-2000:] if bench.stderr else "")
        time.sleep(10)                        # mid-run: servers loading or answering
        seen |= _descendants(bench.pid)
        bench.send_signal(signal.SIGTERM)
        bench.wait(timeout=120)
        assert gone_within(sorted(seen), 60) == [], [open(f"/proc/{p}/cmdline").read() for p in seen if running(p)]
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
        for pid in seen:
            if running(pid):
                os.kill(pid, signal.SIGKILL)

"""Child-process lifetime: every long-lived process swiftbox starts (a vLLM engine, the benchmark's servers, peers
and load generators) dies with the process that started it.

A child is started by `start`: in its own session (so a terminal's Ctrl-C reaches only the parent, which stops it in
order, and `stop` can end the child's whole process group), registered, and with `PR_SET_PDEATHSIG` set (Linux
prctl, in the child before exec) so the kernel sends it SIGTERM when the parent dies in any way - SIGKILL and the
OOM killer included, where no cleanup code of the parent runs. Registered children still alive when the parent
exits normally, by an exception, or by SIGTERM / SIGHUP once `exit_on_signals` made those raise `SystemExit`, are
stopped (process group: SIGTERM, then SIGKILL after a grace period) by `stop_all`, run from `atexit`.

The death signal is tied to the thread that forked the child: `start` is meant for the main thread, or a thread
that outlives the child (a server's own thread would end the child with it).
"""
from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Optional, Sequence

PR_SET_PDEATHSIG = 1
GRACE_S = 30.0

_children: dict[int, subprocess.Popen] = {}
_lock = threading.Lock()


def _prctl() -> Optional[Callable[..., int]]:
    """libc's prctl, looked up in the parent (the child, between fork and exec, only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def _die_with(parent: int, prctl: Optional[Callable[..., int]]) -> Callable[[], None]:
    def preexec() -> None:        # runs in the child after fork: no imports, no locks, nothing but syscalls
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:      # the parent died before the death signal was armed
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


def start(argv: Sequence[str], **popen: Any) -> subprocess.Popen:
    """`subprocess.Popen(argv, **popen)` in a new session, dying with this process, registered for `stop_all`."""
    if "preexec_fn" in popen:
        raise TypeError("procs.start sets preexec_fn itself")
    popen.setdefault("start_new_session", True)
    proc = subprocess.Popen(list(argv), preexec_fn=_die_with(os.getpid(), _PRCTL), **popen)  # noqa: PLW1509
    with _lock:
        _children[proc.pid] = proc
    return proc


def stop(proc: subprocess.Popen, grace: float = GRACE_S) -> None:
    """SIGTERM to the child's process group, SIGKILL after `grace` seconds; reaped and unregistered."""
    try:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=10)
        else:                         # the leader is gone; what it started in its group may not be
            _signal_group(proc, signal.SIGKILL)
    finally:
        with _lock:
            _children.pop(proc.pid, None)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except (ProcessLookupError, OSError):
            pass


def alive() -> list[subprocess.Popen]:
    with _lock:
        return [p for p in _children.values() if p.poll() is None]


def stop_all(grace: float = GRACE_S) -> None:
    """Stop every registered child: all get SIGTERM at once, then SIGKILL for those alive after `grace`."""
    with _lock:
        procs = list(_children.values())
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        stop(proc, grace=0.0)


atexit.register(stop_all)


def exit_on_signals(signals: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> None:
    """Make SIGTERM / SIGHUP raise SystemExit(128 + signal) in the main thread, so `finally` blocks and `atexit`
    (hence `stop_all`) run, as they do for Ctrl-C; a second signal while stopping is not caught again."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: Any) -> None:
        for sig in signals:
            signal.signal(sig, signal.SIG_DFL)
        raise SystemExit(128 + signum)

    for sig in signals:
        signal.signal(sig, handler)

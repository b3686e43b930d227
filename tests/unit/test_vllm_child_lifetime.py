"""The vLLM engine child of `serve` dies with `serve` (issue 43, class 9): killed outright (SIGKILL, the OOM killer:
no cleanup runs) or stopped by SIGTERM, the serving process takes its engine along. Before, the child sat in its own
session holding the accelerator's memory until someone killed it by hand. (The fake `vllm serve` stands in.)"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.unit.test_procs import gone_within, running

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc are Linux's")

SERVE = """
import sys, time
from pathlib import Path
from swiftbox import procs
from swiftbox.device.cpu import CpuPlatform
from swiftbox.serving.server import bind
from swiftbox.serving.vllm.child import VllmProcess
from swiftbox.serving.vllm.plan import plan
from swiftbox.steps import ServeStep

procs.exit_on_signals()
probe = bind("127.0.0.1", 0)
port = probe.getsockname()[1]
probe.close()
p = plan(ServeStep(engine="vllm"), CpuPlatform(), model_path="/m", base_name="base", loras={}, dtype="float32",
         port=port, executable=[sys.executable, sys.argv[1]])
engine = VllmProcess(p, Path(sys.argv[2]))
engine.start(timeout=120)
print(engine.proc.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_the_engine_child_dies_with_serve(how, tmp_path):
    fake = str(ROOT / "tests" / "fakes" / "fake_vllm.py")
    parent = subprocess.Popen([sys.executable, "-c", SERVE, fake, str(tmp_path / "vllm.log")], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline() or 0)
        assert child and running(child), (tmp_path / "vllm.log").read_text()[-1000:]
        parent.send_signal(how)
        parent.wait(timeout=60)
        assert gone_within([child], 40) == []
    finally:
        if parent.poll() is None:
            parent.kill()
        if child and running(child):
            os.kill(child, signal.SIGKILL)

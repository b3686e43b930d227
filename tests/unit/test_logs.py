"""Quiet by default (swiftbox/logs.py): third-party noise lands in the run's log file, real errors and
swiftbox's own lines stay on the terminal, and --verbose / SWIFTBOX_VERBOSE=1 shows everything."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, run_cli

NOISE = """
import logging, sys, warnings
from pathlib import Path
from swiftbox import logs
logs.setup()
logging.getLogger("torchao").warning("Failed to load /x/_C_mxfp8.so")
warnings.warn("is_gradient_checkpointing is deprecated", FutureWarning)
logging.getLogger("torchao").error("a real failure")
print("swiftbox: own line", file=sys.stderr)
logs.attach(Path(sys.argv[1]))
logging.getLogger("peft").warning("after attach")
"""


def _run(tmp_path, env_extra=None):
    import os

    env = {k: v for k, v in os.environ.items() if k != "SWIFTBOX_VERBOSE"}
    env.update({"PYTHONPATH": str(ROOT), **(env_extra or {})})
    log = tmp_path / "run" / "swiftbox.log"
    res = subprocess.run([sys.executable, "-c", NOISE, str(log)], capture_output=True, text=True, env=env,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stderr, log


def test_noise_goes_to_the_run_log_and_errors_stay_on_screen(tmp_path):
    stderr, log = _run(tmp_path)
    assert "Failed to load" not in stderr and "FutureWarning" not in stderr
    assert "a real failure" in stderr and "swiftbox: own line" in stderr
    text = log.read_text()
    assert "Failed to load /x/_C_mxfp8.so" in text and "FutureWarning" in text and "after attach" in text


def test_verbose_shows_the_libraries_again(tmp_path):
    stderr, log = _run(tmp_path, {"SWIFTBOX_VERBOSE": "1"})
    assert "Failed to load /x/_C_mxfp8.so" in stderr and "FutureWarning" in stderr
    assert not log.exists()


def test_verbose_flag_is_accepted_before_or_after_the_command():
    for args in (("--verbose", "sft", "--help"), ("sft", "--verbose", "--help"), ("-v", "doctor", "--help")):
        res = run_cli(*args, timeout=60)
        assert res.returncode == 0 and "usage:" in res.stdout, (args, res.stderr)


FD_NOISE = """
import logging, os, sys
from pathlib import Path
from swiftbox import logs
logs.setup()
logs.attach(Path(sys.argv[1]))
logging.basicConfig(level=logging.INFO)           # what tokenicer does at import
logging.getLogger("httpx2").info("HTTP Request: POST http://127.0.0.1/v1 200 OK")
logging.getLogger("bitsandbytes.backends.cpu.ops").warning("Failed to load CPU gemm_4bit_forward")
print("swiftbox: before")
with logs.captured("noisy call") as terminal:
    os.write(1, b"C++ on fd 1\\n")
    os.write(2, b"Compiling extension on fd 2\\n")
    print("a library's print")
    print("a library's stderr print", file=sys.stderr)
    terminal.write("swiftbox: own progress\\n")
try:
    with logs.captured("failing call"):
        os.write(2, b"noise before the error\\n")
        raise RuntimeError("boom")
except RuntimeError:
    print("swiftbox: error line", file=sys.stderr)
print("swiftbox: after")
"""


def _run_fd(tmp_path, env_extra=None):
    import os

    env = {k: v for k, v in os.environ.items() if k != "SWIFTBOX_VERBOSE"}
    env.update({"PYTHONPATH": str(ROOT), **(env_extra or {})})
    log = tmp_path / "run" / "swiftbox.log"
    res = subprocess.run([sys.executable, "-c", FD_NOISE, str(log)], capture_output=True, text=True, env=env,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout + res.stderr, log


def test_output_written_to_the_file_descriptors_goes_to_the_run_log_and_is_restored(tmp_path):
    shown, log = _run_fd(tmp_path)
    assert sorted(shown.splitlines()) == ["swiftbox: after", "swiftbox: before", "swiftbox: error line",
                                          "swiftbox: own progress"]
    text = log.read_text()
    for line in ("C++ on fd 1", "Compiling extension on fd 2", "a library's print", "a library's stderr print",
                 "noise before the error", "HTTP Request: POST", "Failed to load CPU gemm_4bit_forward",
                 "--- noisy call: its output ---"):
        assert line in text, line
    assert "swiftbox: own progress" not in text


def test_verbose_leaves_the_file_descriptors_alone(tmp_path):
    shown, log = _run_fd(tmp_path, {"SWIFTBOX_VERBOSE": "1"})
    assert "C++ on fd 1" in shown and "Compiling extension on fd 2" in shown and "swiftbox: own progress" in shown
    assert not log.exists()


TTY_NOISE = """
import os, sys
from pathlib import Path
from swiftbox import logs
from swiftbox.export.progress import layer_progress
logs.setup()
logs.attach(Path(sys.argv[1]))
with logs.captured("quantize") as terminal, layer_progress("quantize test", 2, terminal) as done:
    print("a library's print")
    os.write(1, b"a kernel build on fd 1\\n")
    done(0)
    done(1)
print("swiftbox: after")
"""


def test_on_a_terminal_the_progress_bar_shows_and_the_library_output_still_goes_to_the_log(tmp_path):
    """On a TTY rich's live display would route sys.stdout through itself onto the screen (gptqmodel's log bar
    printed 400 lines that way); the bar must not take the library's prints with it."""
    import os
    import pty

    log = tmp_path / "run" / "swiftbox.log"
    env = {k: v for k, v in os.environ.items() if k != "SWIFTBOX_VERBOSE"}
    env.update({"PYTHONPATH": str(ROOT), "TERM": "xterm"})
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", TTY_NOISE, str(log)], stdin=slave, stdout=slave, stderr=slave,
                            env=env, close_fds=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:        # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0, out.decode(errors="replace")
    shown = out.decode(errors="replace")
    assert "quantize test" in shown and "2/2" in shown and "swiftbox: after" in shown
    assert "a library's print" not in shown and "a kernel build" not in shown, shown
    text = log.read_text()
    assert "a library's print" in text and "a kernel build on fd 1" in text


VANISHED = """
import os, shutil, sys
from pathlib import Path
from swiftbox import logs
logs.setup()
logs.attach(Path(sys.argv[1]))
shutil.rmtree(Path(sys.argv[1]).parent)          # the run's folder removed after it was attached
with logs.captured("after removal"):
    os.write(2, b"noise after removal\\n")
print("swiftbox: still running", file=sys.stderr)
"""


def test_captured_survives_a_removed_run_folder(tmp_path):
    """A run folder removed after attach (a refused run, a cleanup) is made again; the step does not fail."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "SWIFTBOX_VERBOSE"}
    log = tmp_path / "run" / "swiftbox.log"
    res = subprocess.run([sys.executable, "-c", VANISHED, str(log)], capture_output=True, text=True,
                         env={**env, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "swiftbox: still running" in res.stderr and "noise after removal" not in res.stderr
    assert "noise after removal" in log.read_text()

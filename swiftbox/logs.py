"""Quiet by default: the one place that decides where third-party noise goes.

Without `--verbose` (or SWIFTBOX_VERBOSE=1), the libraries' own warnings, banners and progress - torch's
`_pytree` deprecation lines, torchao's "Failed to load" messages, FutureWarnings, gptqmodel's banner, its
per-module progress and "Compiling extension" lines, bitsandbytes' kernel-hub line, tokenicer's and httpx's
INFO lines, matplotlib's font-cache line, transformers' "Loading weights" bars - go to the run's log file
(`runs/<recipe>/swiftbox.log`) instead of the screen. swiftbox's own lines, progress bars and the libraries'
real errors (level ERROR and above) still reach the terminal.

Three mechanisms, all here: the root logger and the noisy named loggers get the run's log as their handler
(so a library's `logging.basicConfig(level=INFO)` at import - tokenicer's - finds handlers and does nothing);
the libraries' progress bars are switched off through their public switches (`quiet_progress_bars`); and
output written straight to file descriptors 1/2 (print(), C/C++ extensions, gptqmodel's log bar) is redirected
into the run's log around the calls that make it (`captured`), restored after. `setup()` is called once, by the
CLI (which the menu runs under) and by the distributed worker; `attach()` by the runner once it knows the run's
directory.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import IO, Iterator, Optional

ENV = "SWIFTBOX_VERBOSE"
# loggers whose records below ERROR are noise on a terminal (logbar is gptqmodel's logger)
NOISY = ("torch", "torchao", "logbar", "gptqmodel", "datasets", "accelerate", "peft", "trl", "huggingface_hub",
         "modelscope", "httpx", "urllib3", "filelock", "py.warnings", "lm_eval", "lm-eval", "evaluate",
         "bitsandbytes",     # "Failed to load CPU gemm_4bit_forward from kernels-community" on every CPU import
         "tokenicer")        # gptqmodel's tokenizer helper: "Auto fixed pad_token_id"
OWN = "swiftbox"       # swiftbox's own loggers (the server's): warnings on the terminal as before, all in the log
# set before the libraries are imported; a value the user exported wins
QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TORCH_LOGS": "-torch",      # torch configures its own "torch" logger at import: only ERROR and above
}
# loggers that print to the terminal themselves (gptqmodel's logbar): only their errors are let through
SELF_PRINTING = ("logbar",)
BUFFER = 5000          # records kept before the run's log file is known


class RunLog(logging.Handler):
    """Buffers records until the run's log file is known, then appends them (and all later ones) there."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.path: Optional[Path] = None
        self.pending: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.path is None:
            if len(self.pending) < BUFFER:
                self.pending.append(record)
            return
        try:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(self.format(record) + "\n")
        except OSError:
            pass

    def attach(self, path: Path) -> None:
        path = Path(os.path.abspath(path))    # a later chdir (the menu, tests) must not move the log
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        pending, self.pending = self.pending, []
        for record in pending:
            self.emit(record)


class _Terminal(logging.StreamHandler):
    """Real errors from the libraries still reach the terminal."""

    def __init__(self) -> None:
        super().__init__()
        self.setLevel(logging.ERROR)


_run_log: Optional[RunLog] = None


def verbose_requested() -> bool:
    return os.environ.get(ENV, "").strip() not in ("", "0")


def setup(verbose: bool = False) -> None:
    """Route third-party noise to the run's log (or, verbose, leave the libraries as they are). Idempotent."""
    global _run_log
    if verbose or verbose_requested():
        os.environ[ENV] = "1"          # torchrun workers and other children inherit the choice
        return
    if _run_log is not None:
        return
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    _run_log = RunLog()
    terminal = _Terminal()
    for name in NOISY:
        logger = logging.getLogger(name)
        logger.handlers = [_run_log, terminal]
        logger.propagate = False
        # WARNING, not lower: a lower level here would enable the INFO chatter of every child logger
        logger.setLevel(logging.ERROR if name in SELF_PRINTING else logging.WARNING)
    # every other library's logger (bitsandbytes, tokenicer, httpx2 under openai, matplotlib, ...) propagates to
    # the root: the run's log too, INFO included. Handlers on the root also make a library's import-time
    # logging.basicConfig(level=INFO) a no-op (tokenicer's put every INFO line of every library on stderr).
    root = logging.getLogger()
    root.handlers = [_run_log, terminal]
    root.setLevel(logging.INFO)
    own = logging.getLogger(OWN)
    own_terminal = _Terminal()
    own_terminal.setLevel(logging.WARNING)
    own.handlers = [_run_log, own_terminal]
    own.propagate = False
    own.setLevel(logging.INFO)
    logging.captureWarnings(True)      # warnings.warn(...) -> the "py.warnings" logger -> the run's log
    warnings.simplefilter("default")   # each distinct warning once per location, then in the log file


def attach(path: Path) -> None:
    """Write the routed records to `path` from now on (the runner calls it with runs/<recipe>/swiftbox.log)."""
    if _run_log is not None:
        _run_log.attach(path)


def log_path() -> Optional[Path]:
    return _run_log.path if _run_log is not None else None


def quiet_gptqmodel() -> None:
    """gptqmodel prints through its own logger, logbar, straight to stdout (banner, "ENV: Auto setting ...").
    Create that logger now at ERROR, before gptqmodel's import does (PEFT imports it on LoRA creation), so only
    its errors show. A no-op when verbose, when setup() was not called (the Python API) or without [quant]."""
    import importlib.util

    if _run_log is None or verbose_requested() or importlib.util.find_spec("logbar") is None:
        return
    import sys

    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:                        # no stdout at all: nothing to keep quiet
        saved = -1
    if saved < 0:
        from logbar import LogBar

        LogBar.shared().setLevel(logging.ERROR)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:                                   # its creation prints a blank line, below Python's sys.stdout
        os.dup2(devnull, 1)
        from logbar import LogBar

        LogBar.shared().setLevel(logging.ERROR)
        sys.stdout.flush()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def quiet_progress_bars() -> None:
    """No transformers progress bars ("Loading weights", ...): one swiftbox line per step says what happens.
    huggingface_hub's download bars stay on a terminal (a download can take minutes) and go off in a pipe, where
    each update would be a line. A no-op when verbose or when setup() was not called (the Python API)."""
    if _run_log is None or verbose_requested():
        return
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()       # transformers' bars, and the hub's with them
    if sys.stderr.isatty():
        hub_utils.enable_progress_bars()    # the hub's back for downloads; transformers' stay off


def capturing() -> bool:
    """Would `captured()` redirect (quiet, and the run's log file known)?"""
    return _run_log is not None and _run_log.path is not None and not verbose_requested()


@contextlib.contextmanager
def captured(what: str) -> Iterator[IO[str]]:
    """Everything written to file descriptors 1 and 2 while the block runs - print(), C/C++ extensions, a
    library's own progress display - goes to the run's log, restored after (also on an error, whose message the
    caller then prints as usual). Yields a stream to the real terminal (stderr) for swiftbox's own progress.
    Without a run log, or verbose, nothing is redirected and the stream is sys.stderr."""
    if not capturing():
        yield sys.stderr
        return
    assert _run_log is not None and _run_log.path is not None
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        saved = (os.dup(1), os.dup(2))
    except OSError:                        # no stdout / stderr at all: nothing to keep quiet
        yield sys.stderr
        return
    try:   # the run's folder may have been removed since it was attached (a refused run, a cleanup)
        _run_log.path.parent.mkdir(parents=True, exist_ok=True)
        log_fd = os.open(_run_log.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:                        # unwritable: the noise stays on the terminal rather than failing the step
        for fd in saved:
            os.close(fd)
        yield sys.stderr
        return
    import time

    os.write(log_fd, f"{time.strftime('%Y-%m-%d %H:%M:%S')} --- {what}: its output ---\n".encode())
    terminal = os.fdopen(os.dup(saved[1]), "w", buffering=1, encoding=getattr(sys.stderr, "encoding", None) or "utf-8",
                         errors="replace")
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        yield terminal
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with contextlib.suppress(Exception):
            terminal.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log_fd):
            os.close(fd)
        terminal.close()

"""Quiet by default: the one place that decides where third-party noise goes.

Without `--verbose` (or SWIFTBOX_VERBOSE=1), the libraries' own warnings and banners - torch's `_pytree`
deprecation lines, torchao's "Failed to load" messages, FutureWarnings, gptqmodel's banner and its
"ENV: Auto setting ..." lines, transformers' advisory warnings - go to the run's log file
(`runs/<recipe>/swiftbox.log`) instead of the screen. swiftbox's own lines, progress bars and the
libraries' real errors (level ERROR and above) still reach the terminal. `setup()` is called once, by the
CLI (which the menu runs under) and by the distributed worker; `attach()` by the runner once it knows the
run's directory.
"""
from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Optional

ENV = "SWIFTBOX_VERBOSE"
# loggers whose records below ERROR are noise on a terminal (logbar is gptqmodel's logger)
NOISY = ("torch", "torchao", "logbar", "gptqmodel", "datasets", "accelerate", "peft", "trl", "huggingface_hub",
         "modelscope", "httpx", "urllib3", "filelock", "py.warnings",
         "bitsandbytes",     # "Failed to load CPU gemm_4bit_forward from kernels-community" on every CPU import
         "tokenicer")        # gptqmodel's tokenizer helper: "Auto fixed pad_token_id"
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

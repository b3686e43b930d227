"""argparse that reports a bad flag as one line (exit 2), shared by the CLI and the commands it runs
(parity), so nothing below the CLI imports the CLI."""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports bad flags as one line (exit 2) instead of usage + error."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)

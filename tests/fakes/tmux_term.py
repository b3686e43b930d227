"""A real terminal for end-to-end menu tests and screenshots: one tmux server per use (`-L` socket).

    with Tmux("./launch.sh", cwd=tmp) as term:
        term.wait_for("What would you like to do?")
        term.keys("Down", "Enter")
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Optional

EXIT_MARK = "MENU-EXITED rc="


def have_tmux() -> bool:
    return shutil.which("tmux") is not None


class Tmux:
    def __init__(self, command: str, cwd: Path, width: int = 110, height: int = 40, env: Optional[dict] = None):
        self.socket = f"swiftbox-menu-{uuid.uuid4().hex[:10]}"
        self.command, self.cwd, self.width, self.height = command, Path(cwd), width, height
        self.env = env or {}
        self.started = 0.0

    def _tmux(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        if check and proc.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def __enter__(self) -> Tmux:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        # the shell stays after the menu exits so the exit status and the last screen can be read
        script = (f"cd {shlex.quote(str(self.cwd))} && {('export ' + exports + ' && ') if exports else ''}"
                  f"{self.command}; echo; echo \"{EXIT_MARK}$?\"; sleep 600")
        env = dict(os.environ, TERM="xterm-256color")
        env.pop("TMUX", None)
        self.started = time.monotonic()
        subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", "new-session", "-d", "-s", "menu",
                        "-x", str(self.width), "-y", str(self.height), "bash", "-c", script],
                       check=True, env=env, timeout=30)
        return self

    def __exit__(self, *exc) -> None:
        self._tmux("kill-server", check=False)

    def keys(self, *keys: str, pause: float = 0.4) -> None:
        for key in keys:
            self._tmux("send-keys", "-t", "menu", key)
            time.sleep(pause)

    def type(self, text: str, pause: float = 0.4) -> None:
        self._tmux("send-keys", "-t", "menu", "-l", text)
        time.sleep(pause)

    def screen(self, ansi: bool = False, history: bool = False) -> str:
        args = ["capture-pane", "-p", "-t", "menu"] + (["-e"] if ansi else []) + (["-S", "-"] if history else [])
        return self._tmux(*args)

    def wait_for(self, text: str, timeout: float = 30, history: bool = False, after: Optional[str] = None) -> float:
        """Seconds since start when `text` appeared (below the last `after`, if given); AssertionError if never."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen(history=history or after is not None)
            if after is not None:
                screen = screen.rpartition(after)[2] if after in screen else ""
            if text in screen:
                return time.monotonic() - self.started
            time.sleep(0.02)
        where = f" after {after!r}" if after else ""
        raise AssertionError(f"{text!r} did not appear{where} within {timeout}s; screen:\n{self.screen(history=True)}")

    def exit_code(self, timeout: float = 30) -> int:
        self.wait_for(EXIT_MARK, timeout, history=True)
        tail = self.screen(history=True).split(EXIT_MARK)[-1]
        return int(tail.split()[0])

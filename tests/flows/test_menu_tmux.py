"""End to end: `./launch.sh` in a real terminal (tmux, one `-L` socket per test, killed at the end).

Runs in a temporary working directory so runs/ and recipes/ written by the menu stay out of the repo.
The fine-tune test trains for real where the sft pipeline is in this checkout (then it is marked
slow); where it is not, the menu must say so plainly and run nothing.
"""
from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tests.fakes.tmux_term import Tmux, have_tmux

pytestmark = pytest.mark.skipif(not have_tmux(), reason="tmux is not installed")
LAUNCH = str(ROOT / "launch.sh")
MAIN = "What would you like to do?"
ACTIVE = "(↑↓ move · type to filter"  # shown only while the main menu waits for a key


def test_doctor_then_quit(tmp_path):
    with Tmux(LAUNCH, cwd=tmp_path) as term:
        term.wait_for(MAIN, timeout=30)  # first-paint time is measured by `bench startup`, not asserted here
        term.wait_for("GiB", timeout=60)  # the header fills in once the platform is resolved
        term.type("Device")
        term.keys("Enter")
        term.wait_for("capabilities", timeout=60, history=True)  # the table is taller than the pane
        term.wait_for("Press Enter to go back", timeout=30)
        term.keys("Enter")
        term.wait_for(ACTIVE, after="Press Enter to go back")
        term.type("Quit")
        term.keys("Enter")
        assert term.exit_code() == 0
        everything = term.screen(history=True)
    assert "bye" in everything
    assert "Traceback" not in everything


def test_ctrl_c_returns_to_main_then_quits(tmp_path):
    with Tmux(LAUNCH, cwd=tmp_path) as term:
        term.wait_for(MAIN, timeout=30)
        term.keys("Enter")                                 # Download a model
        term.wait_for("Model to download")
        term.keys("C-c")
        term.wait_for(ACTIVE, after="back at the main menu")  # Ctrl-C again only once it listens
        term.keys("C-c")
        assert term.exit_code() == 0
        assert "Traceback" not in term.screen(history=True)


def _fine_tune_keys(term: Tmux) -> None:
    term.wait_for(MAIN, timeout=30)
    term.type("Fine")
    term.keys("Enter")


def test_toy_fine_tune_finishes(tmp_path):
    with Tmux(LAUNCH, cwd=tmp_path, height=60) as term:
        _fine_tune_keys(term)
        term.wait_for("Model to fine-tune")
        term.keys("Enter")                                 # toy
        term.wait_for("Dataset")
        term.keys("Enter")                                 # parity_sft.jsonl (bundled)
        term.wait_for("Method")
        term.keys("Enter")                                 # LoRA
        term.wait_for("LoRA rank")
        term.keys("Enter")                                 # 8
        term.wait_for("Epochs")
        term.keys("BSpace")
        term.type("1")
        term.keys("Enter")
        term.wait_for("Output directory")
        term.keys("Enter")
        term.wait_for("What now?")
        term.keys("Down", "Down", "Down", "Enter")         # Edit a setting
        term.wait_for("Setting to change")
        term.type("sft.max_steps=4")
        term.keys("Enter")
        term.wait_for("set sft.max_steps=4")
        term.keys("Enter")                                 # done editing
        term.wait_for("max_steps: 4")
        term.keys("Enter")                                 # Run
        term.wait_for("sft finished. Next?", timeout=900)
        term.keys("Up", "Enter")                           # Back to the main menu
        term.wait_for(ACTIVE, after="Next? Back to the main menu")
        term.keys("C-c")
        assert term.exit_code() == 0
        assert "Traceback" not in term.screen(history=True)
    manifests = list((tmp_path / "runs").glob("*/sft/swiftbox.json"))
    assert len(manifests) == 1

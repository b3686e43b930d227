"""Main menu (placeholder until the menu issue lands): lists what swiftbox does and runs doctor/quickstart."""
from __future__ import annotations

import sys


def run_menu() -> int:
    if not sys.stdin.isatty():
        print("swiftbox: the menu needs an interactive terminal; see ./launch.sh --help for commands",
              file=sys.stderr)
        return 2
    import questionary

    choice = questionary.select(
        "swiftbox - what would you like to do?",
        choices=["Run the quickstart (toy model, offline)", "Device & environment (doctor)", "Quit"],
    ).ask()
    if choice is None or choice == "Quit":
        return 0
    from swiftbox.cli import main

    return main(["quickstart"] if choice.startswith("Run") else ["doctor"])

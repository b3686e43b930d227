"""What every flow shares: the device probe, where runs and recipes live, how a recipe is run, output."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from menus.device_info import DeviceProbe


def run_with_runner(recipe: dict, runs_root: Optional[str]) -> dict:
    """The same runner as `./launch.sh run`; imported only now (it resolves the platform, torch)."""
    from swiftbox.runner import run_recipe

    return run_recipe(recipe, runs_root=runs_root)


def print_with_report(summary: dict) -> None:
    from swiftbox.report import print_summary

    print_summary(summary)


@dataclass
class MenuSession:
    probe: DeviceProbe
    runs_dir: Path = Path("runs")
    recipes_dir: Path = Path("recipes")
    run: Callable[[dict, Optional[str]], dict] = run_with_runner
    show_summary: Callable[[dict], None] = print_with_report
    echo: Callable[[str], None] = field(default=lambda msg: print(msg, flush=True))

    @property
    def runs_root(self) -> Optional[str]:
        """None when runs go to the runner's default place (runs/), so recipes stay portable."""
        return None if self.runs_dir == Path("runs") else str(self.runs_dir)

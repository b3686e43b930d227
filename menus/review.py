"""The last screen of every flow: the recipe as YAML, then run / save and run / save only / edit / back.

Saving writes recipes/<name>.yaml (the same file `./launch.sh run` takes); running hands the recipe to
the runner and prints the summary table. Failures are shown as the runner's one line, never a traceback.
"""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from menus import widgets
from menus.session import MenuSession
from menus.widgets import BACK, ToMain

RUN, SAVE_RUN, SAVE, EDIT = "run", "save-run", "save", "edit"


@dataclass
class Outcome:
    recipe: dict
    saved: Optional[str] = None
    summary: Optional[dict] = None
    error: Optional[str] = None

    @property
    def last_output(self) -> Optional[tuple[str, str]]:
        """(step kind, output dir) of the last step when the whole recipe ran to the end."""
        steps = (self.summary or {}).get("steps") or []
        if not steps or not all(s.get("ok") for s in steps) or not steps[-1].get("output"):
            return None
        return steps[-1]["step"], steps[-1]["output"]


def to_yaml(recipe: dict) -> str:
    import yaml

    return yaml.safe_dump(recipe, sort_keys=False, default_flow_style=None, width=100)


def show(recipe: dict) -> None:
    from rich.console import Console
    from rich.panel import Panel
    from rich.syntax import Syntax

    Console().print(Panel(Syntax(to_yaml(recipe).rstrip(), "yaml", theme="ansi_dark", background_color="default"),
                          title="recipe", title_align="left", expand=False))


def problem(recipe: dict) -> Optional[str]:
    """Why the recipe is invalid (one line), or None."""
    from swiftbox.errors import UserError
    from swiftbox.recipe import validate_recipe

    try:
        validate_recipe(recipe, "recipe")
    except UserError as exc:
        return str(exc)
    return None


def review(session: MenuSession, recipe: dict, saved_as: Optional[str] = None):
    """Show `recipe` and act on it; an Outcome, or BACK (Esc / Back) to change the answers."""
    while True:
        show(recipe)
        invalid = problem(recipe)
        if invalid:
            session.echo(f"  ! {invalid}")
        blocked = invalid and "the recipe is invalid: edit it"
        choices = [
            widgets.choice("Run", RUN, disabled=blocked),
            widgets.choice("Save and run", SAVE_RUN, disabled=blocked or (saved_as and "already saved")),
            widgets.choice("Save only", SAVE, disabled=(invalid and "the recipe is invalid: edit it")
                           or (saved_as and f"already saved as {saved_as}")),
            widgets.choice("Edit a setting", EDIT),
            widgets.choice("Back", BACK),
        ]
        action = widgets.select("What now?", choices)
        if action is BACK:
            return BACK
        if action == EDIT:
            edited = edit(session, recipe)
            if edited is not recipe:
                recipe, saved_as = edited, None  # the file on disk no longer says this
            continue
        if action in (SAVE, SAVE_RUN):
            saved_as = save(session, recipe)
            if saved_as is None:
                continue
            if action == SAVE:
                return Outcome(recipe, saved=saved_as)
        return run(session, recipe, saved_as)


def edit(session: MenuSession, recipe: dict) -> dict:
    """Change settings the way `--set` does (sft.epochs=1, lora.rank is sft.lora.rank=16, name=x)."""
    from swiftbox.errors import UserError
    from swiftbox.recipe import apply_overrides, validate_recipe

    while True:
        answer = widgets.text("Setting to change, as step.key=value (e.g. sft.epochs=1); empty when done:")
        if answer is BACK or not answer:
            return recipe
        try:
            changed = apply_overrides(recipe, [answer])
            validate_recipe(changed, "recipe")
        except UserError as exc:
            session.echo(f"  ! {exc}")
            continue
        recipe = changed
        session.echo(f"  set {answer}")


def save(session: MenuSession, recipe: dict) -> Optional[str]:
    """Write recipes/<name>.yaml; asks before replacing a file. Returns the path, or None if not saved."""
    folder = Path(session.recipes_dir)
    file = folder / f"{recipe['name']}.yaml"
    if file.exists():
        answer = widgets.confirm(f"{file} exists. Replace it?", default=False)
        if answer is not True:
            return None
    folder.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f".{file.name}.tmp")
    clean, dropped = without_secrets(recipe)
    tmp.write_text(f"# made by the swiftbox menu; run with ./launch.sh run {file}\n" + to_yaml(clean))
    os.replace(tmp, file)
    session.echo(f"  saved {file}  (./launch.sh run {file})")
    if dropped:
        session.echo("  the API key was not written to the file: set SWIFTBOX_API_KEY when you run it")
    return str(file)


def without_secrets(recipe: dict) -> tuple[dict, bool]:
    """The recipe minus API keys (a saved file must not carry one), and whether one was dropped."""
    import copy

    clean, dropped = copy.deepcopy(recipe), False
    for step in clean.get("steps", []):
        for settings in (step.values() if isinstance(step, dict) else ()):
            if isinstance(settings, dict) and settings.get("api_key"):
                settings.pop("api_key")
                dropped = True
    return clean, dropped


def run(session: MenuSession, recipe: dict, saved_as: Optional[str] = None) -> Outcome:
    from swiftbox.errors import SwiftboxError

    outcome = Outcome(recipe, saved=saved_as)
    try:
        outcome.summary = session.run(recipe, session.runs_root)
    except SwiftboxError as exc:
        outcome.error = " ".join(str(exc).split())
    except KeyboardInterrupt:
        kinds = [next(iter(step)) for step in recipe.get("steps", []) if isinstance(step, dict) and step]
        session.echo("  server stopped" if kinds[-1:] == ["serve"] else
                     "  interrupted; a training step keeps <output>.partial/ so resume: true continues it")
        raise ToMain() from None
    except Exception as exc:  # a bug, not bad input: keep the menu alive and say how to see more
        outcome.error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        if os.environ.get("SWIFTBOX_DEBUG"):
            traceback.print_exc()
        else:
            outcome.error += "  (SWIFTBOX_DEBUG=1 shows the traceback)"
    if outcome.error:
        session.echo(f"  ! swiftbox: {outcome.error}")
    elif outcome.summary is not None:
        session.show_summary(outcome.summary)
    return outcome

"""'Run a recipe': pick a YAML file under recipes/ (or type a path), check it, review and run it."""
from __future__ import annotations

from pathlib import Path

from menus import review as review_screen
from menus import widgets
from menus.datasets import ROOT, display
from menus.session import MenuSession
from menus.widgets import BACK

OTHER = "__other__"


def recipe_files(session: MenuSession) -> list[str]:
    seen, out = set(), []
    for folder in (Path(session.recipes_dir), ROOT / "recipes"):
        if not folder.is_dir():
            continue
        for file in sorted(folder.glob("*.y*ml")):
            key = file.resolve()
            if key not in seen:
                seen.add(key)
                out.append(display(file))
    return out


def check_file(raw: str):
    from swiftbox.errors import UserError
    from swiftbox.recipe import load_recipe

    try:
        load_recipe(raw.strip())
    except UserError as exc:
        return str(exc)
    return True


def run_recipe_file(session: MenuSession):
    """The review Outcome, or BACK."""
    import yaml

    files = recipe_files(session)
    choices = [widgets.choice(f, f) for f in files] + [widgets.choice("A recipe file elsewhere", OTHER)]
    while True:
        answer = widgets.select("Recipe:", choices)
        if answer is BACK:
            return BACK
        if answer == OTHER:
            answer = widgets.path("Recipe file:", validate=check_file)
            if answer is BACK:
                continue
        problem = check_file(answer)
        if problem is not True:
            session.echo(f"  ! {problem}")
            continue
        recipe = yaml.safe_load(Path(answer).read_text())
        outcome = review_screen.review(session, recipe, saved_as=answer)
        if outcome is not BACK:
            return outcome

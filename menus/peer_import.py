"""'Import a config from LLaMA-Factory / ms-swift / Axolotl': a peer's YAML, an ms-swift argument file or an
ms-swift command line, read through swiftbox's importer (swiftbox/migrate) into a recipe, then reviewed like every
other flow (show, save under recipes/, run). A key swiftbox cannot honour is shown as the importer's one line."""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from menus import review as review_screen
from menus import widgets
from menus.session import MenuSession
from menus.widgets import BACK

FILE, COMMAND = "file", "command"


def imported_from_file(raw: str, fetch: bool = True) -> Any:
    """What a peer's file becomes (Imported); raises UserError with the importer's line. `fetch`: resolve a hub
    model to check a template name (off while the answer is being typed)."""
    from swiftbox.errors import UserError
    from swiftbox.migrate import import_config
    from swiftbox.recipe import read_yaml

    source = raw.strip()
    data = read_yaml(Path(source))
    imported = import_config(data, source, fetch=fetch) if isinstance(data, dict) else None
    if imported is None:
        raise UserError(f"{source}: not a LLaMA-Factory / Axolotl YAML or an ms-swift argument file (a swiftbox "
                        "recipe runs from 'Run a recipe')")
    return imported


def imported_from_command(line: str, fetch: bool = True) -> Any:
    """`swift sft --model ...` (or without `swift`) -> the importer's result; raises UserError."""
    from swiftbox.errors import UserError
    from swiftbox.migrate import COMMANDS, translate_argv

    try:
        words = shlex.split(line.replace("\\\n", " "))
    except ValueError as exc:
        raise UserError(f"the command line cannot be split ({exc})") from None
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):   # CUDA_VISIBLE_DEVICES=0 swift sft ...
        words = words[1:]
    if words[:1] == ["swift"]:
        words = words[1:]
    if not words or words[0] not in COMMANDS:
        raise UserError(f"expected `swift COMMAND --flag value ...` with COMMAND one of {', '.join(COMMANDS)}")
    return translate_argv(words[0], words[1:], fetch=fetch)


def _checked(build):
    from swiftbox.errors import UserError

    def check(raw: str):
        if not raw.strip():
            return "type something, or Esc to go back"
        try:
            build(raw, fetch=False)
        except UserError as exc:
            return " ".join(str(exc).split())
        return True
    return check


def import_peer_config(session: MenuSession):
    """The review Outcome, or BACK."""
    while True:
        how = widgets.select("Import what?", [
            widgets.choice("A LLaMA-Factory / Axolotl YAML or an ms-swift argument file", FILE),
            widgets.choice("An ms-swift command line (swift sft|pt|rlhf|export|infer|deploy ...)", COMMAND)])
        if how is BACK:
            return BACK
        build = imported_from_file if how == FILE else imported_from_command
        raw = widgets.path("Config file:", validate=_checked(build)) if how == FILE else \
            widgets.text("Command line:", validate=_checked(build))
        if raw is BACK:
            continue
        imported = build(raw)
        session.echo(f"  {imported.header_line()}")
        outcome = review_screen.review(session, imported.recipe)
        if outcome is not BACK:
            return outcome

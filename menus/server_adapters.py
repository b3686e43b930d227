"""Serve → "A running server": list what it serves, load a LoRA adapter into it, unload one.

The only menu screen that talks to something already running instead of building a recipe: it calls the
server's /v1/models, /v1/load_lora_adapter and /v1/unload_lora_adapter (swiftbox.serving.remote), so it
works with any swiftbox or vLLM server that allows runtime adapters. Esc goes back one level.
"""
from __future__ import annotations

import os
from pathlib import Path

from menus import artifacts, widgets
from menus.session import MenuSession
from menus.widgets import BACK

DEFAULT_URL = "http://127.0.0.1:8000"


def choose(session: MenuSession):
    """The Serve item's first question: start a server (the recipe flow) or manage a running one."""
    return widgets.select("Serve:", [
        widgets.choice("Start a server", "start"),
        widgets.choice("A running server: list, load and unload LoRA adapters", "running"),
        widgets.choice("Back", BACK)], default="start")


def manage(session: MenuSession) -> None:
    from swiftbox.serving import Remote, RemoteError

    url = widgets.text("Server URL:", default=DEFAULT_URL, validate=lambda t: t.startswith(("http://", "https://"))
                       or "expected http://HOST:PORT")
    if url is BACK:
        return
    key = widgets.text("API key (empty: none, or SWIFTBOX_API_KEY from the environment):", password=True,
                       default=os.environ.get("SWIFTBOX_API_KEY", ""))
    if key is BACK:
        return
    remote = Remote(url, key or None, timeout=600)
    try:
        while True:
            try:
                served = remote.models()
            except RemoteError as exc:
                session.echo(f"  ! {url}: {exc}")
                return
            session.echo(f"  {url} serves: {', '.join(served)}")
            action = widgets.select("Adapters:", [
                widgets.choice("Load an adapter", "load"),
                widgets.choice("Unload an adapter", "unload", disabled=None if served[1:] else "no adapter loaded"),
                widgets.choice("Refresh the list", "refresh"),
                widgets.choice("Back", BACK)], default="load")
            if action is BACK:
                return
            try:
                if action == "load":
                    _load(session, remote, served)
                elif action == "unload":
                    name = widgets.select("Unload:", [widgets.choice(n, n) for n in served[1:]]
                                          + [widgets.choice("Back", BACK)])
                    if name is not BACK:
                        session.echo("  " + remote.unload(name))
            except RemoteError as exc:
                session.echo(f"  ! refused: {exc}")
    finally:
        remote.close()


def _load(session: MenuSession, remote, served: list[str]) -> None:
    recent = artifacts.recent(session.runs_dir, ("adapter",))
    choices = [widgets.choice(a.title, a.path) for a in recent]
    choices += [widgets.choice("Other: a directory on the server", "other"), widgets.choice("Back", BACK)]
    path = widgets.select("Adapter to load:", choices)
    if path == "other":
        path = widgets.text("Adapter directory (as the server sees it):")
    if path is BACK or not path:
        return
    default = "-".join(Path(str(path)).parts[-2:])   # runs/<recipe>/<step> -> <recipe>-<step>
    default = default if default not in served else f"{default}-2"
    name = widgets.text("Serve it as (model name):", default=default,
                        validate=lambda t: (bool(t.strip()) and not any(c.isspace() for c in t.strip()))
                        or "a name without spaces")
    if name is BACK:
        return
    local = Path(str(path)).expanduser()
    session.echo("  " + remote.load(name, str(local.resolve()) if local.exists() else str(path)))

"""The main menu (`./launch.sh` with no command): header, items, and the loop that runs flows.

First paint is cheap: questionary and the menu modules only; the platform (torch) is resolved in a
background thread and fills the header in when ready. Ctrl-C inside a flow returns here; Ctrl-C here
(so Ctrl-C twice from anywhere) quits cleanly. After a step finishes, the natural next step is offered
with its output carried forward.
"""
from __future__ import annotations

import sys
from typing import Optional

from menus import widgets
from menus.device_info import DeviceProbe
from menus.session import MenuSession
from menus.widgets import BACK, LiveText, ToMain
from swiftbox.errors import SwiftboxError

ITEMS = [  # (value, title): menu wording, kept here so the first paint needs no pydantic schema
    ("download", "Download a model"),
    ("sft", "Fine-tune (SFT: LoRA / QLoRA / DoRA / full)"),
    ("pt", "Continue pre-training (raw text)"),
    ("align", "Align (DPO, KTO, ORPO, SimPO, reward model, GRPO, GKD)"),
    ("chat", "Chat with a model"),
    ("eval", "Evaluate"),
    ("merge", "Merge adapter"),
    ("quantize", "Quantize"),
    ("serve", "Serve (OpenAI API)"),
    ("import", "Import a config from LLaMA-Factory / ms-swift / Axolotl"),
    ("diagnose", "Diagnose (profile, compare runs, precision)"),
    ("recipe", "Run a recipe"),
    ("doctor", "Device & environment (doctor)"),
    ("quit", "Quit"),
]

# what to offer after a step finished: (next step, title); merge only when the output is an adapter
NEXT = {
    "download": [("sft", "Fine-tune it"), ("chat", "Chat with it"), ("eval", "Evaluate it")],
    "pt": [("sft", "Fine-tune it (SFT)"), ("chat", "Chat test"), ("merge", "Merge the adapter"),
           ("eval", "Evaluate it")],
    "sft": [("chat", "Chat test"), ("merge", "Merge the adapter"), ("eval", "Evaluate it"), ("align", "Align it")],
    **{kind: [("chat", "Chat test"), ("merge", "Merge the adapter"), ("eval", "Evaluate it")]
       for kind in ("dpo", "kto", "orpo", "simpo", "grpo", "gkd")},
    "merge": [("quantize", "Quantize it"), ("serve", "Serve it"), ("chat", "Chat test"), ("eval", "Evaluate it")],
    "quantize": [("serve", "Serve it"), ("eval", "Evaluate it"), ("chat", "Chat test")],
}
INSTRUCTION = "(↑↓ move · type to filter · Enter choose · Esc back · Ctrl-C quit)"


def header(session: MenuSession) -> str:
    return f"swiftbox · the LLM appliance\n  {session.probe.header()}\n  What would you like to do?"


def main_choices() -> list:
    return [widgets.choice(title, value) for value, title in ITEMS]


def run_menu(session: Optional[MenuSession] = None) -> int:
    if session is None and not sys.stdin.isatty():
        print("swiftbox: the menu needs an interactive terminal; see ./launch.sh --help for commands",
              file=sys.stderr)
        return 2
    session = session or MenuSession(probe=DeviceProbe())  # started after the first paint
    last = None
    while True:
        try:
            message = LiveText(lambda: header(session), answered=lambda: "swiftbox:")  # one line in the scrollback
            action = widgets.select(message, main_choices(), default=last, instruction=INSTRUCTION,
                                    refresh_interval=0.5, on_paint=session.probe.start)
        except (ToMain, KeyboardInterrupt):  # Ctrl-C in the main menu (or just before it took the keyboard)
            return goodbye(session)
        if action is BACK:
            continue
        if action == "quit":
            return goodbye(session)
        last = action
        try:
            dispatch(session, action)
        except (ToMain, KeyboardInterrupt):  # Ctrl-C in a prompt, or while something printed (doctor)
            session.echo("  (back at the main menu; Ctrl-C here quits)")
        except SwiftboxError as exc:  # e.g. SWIFTBOX_DEVICE names a device that is not here
            session.echo("  ! swiftbox: " + " ".join(str(exc).split()))


def goodbye(session: MenuSession) -> int:
    session.probe.facts(timeout=1)  # a moment for the probe to finish importing torch (leaving mid-import is safe too)
    session.echo("bye")
    return 0


def dispatch(session: MenuSession, action: str) -> None:
    if action == "doctor":
        return doctor(session)
    if action == "diagnose":
        from menus.diagnose import diagnose

        outcome = diagnose(session)
        if outcome is not None and outcome is not BACK and outcome.last_output:
            follow_up(session, *outcome.last_output)
        return None
    if action in ("recipe", "import"):
        from menus.peer_import import import_peer_config
        from menus.recipe_files import run_recipe_file

        outcome = run_recipe_file(session) if action == "recipe" else import_peer_config(session)
        if outcome is not BACK and outcome.last_output:
            follow_up(session, *outcome.last_output)
        return None
    if action == "serve":
        from menus.server_adapters import choose, manage

        how = choose(session)
        if how is BACK:
            return None
        if how == "running":
            return manage(session)
    return flow(session, action)


def flow(session: MenuSession, kind: str, carry: Optional[str] = None) -> None:
    from menus.flows import FLOWS, refusal, run_flow

    if kind == "align":
        from menus.align import align

        picked = align(session, carry)
        if picked is None:
            return None
        kind = picked

    reason = refusal(session, FLOWS[kind], carry)
    if reason:
        session.echo(f"  {dict(ITEMS).get(kind, kind)}: {reason}. Nothing was asked.")
        return
    outcome = run_flow(session, FLOWS[kind], carry)
    if outcome is not BACK and outcome.last_output:
        follow_up(session, *outcome.last_output)


def follow_up(session: MenuSession, kind: str, output: str) -> None:
    """Offer the natural next step for the output of a `kind` step, carrying `output` forward."""
    nxt = next_step(session, kind, output)
    if nxt is not None:
        flow(session, nxt, carry=output)


def next_step(session: MenuSession, kind: str, output: str) -> Optional[str]:
    from menus.artifacts import describe
    from menus.flows import FLOWS, refusal

    options = NEXT.get(kind)
    if not options:
        return None
    found = describe(output)
    is_adapter = found.artifact == "adapter" if found else kind in ("sft", "pt", "dpo", "kto", "orpo", "simpo", "grpo",
                                                                    "gkd")
    choices = []
    for step, title in options:
        if step == "merge" and not is_adapter:
            continue
        why = step in FLOWS and refusal(session, FLOWS[step], output)
        choices.append(widgets.choice(f"{title}  ({output})", step, disabled=why or None))
    choices.append(widgets.choice("Back to the main menu", BACK))
    answer = widgets.select(f"{kind} finished. Next?", choices)
    return None if answer is BACK else answer


def doctor(session: MenuSession) -> None:
    from swiftbox.device import print_doctor

    if not session.probe.ready:
        session.echo("  detecting the device ...")
    session.probe.facts()
    print_doctor()
    widgets.pause()

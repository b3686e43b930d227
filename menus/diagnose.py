"""The "Diagnose" menu: profile a fine-tune, compare two runs (config check), precision compare.

Like every flow, nothing here does work itself: profiling builds an SFT recipe with a `profile:` block and
goes through the review screen; compare and precision call the same functions as `./launch.sh compare` and
`./launch.sh precision` and show their tables.
"""
from __future__ import annotations

from menus import widgets
from menus.session import MenuSession
from menus.widgets import BACK


def check_dir(raw: str):
    from pathlib import Path

    return True if raw and Path(raw).expanduser().is_dir() else "expected an artifact or run directory"


def diagnose(session: MenuSession) -> None:
    action = widgets.select("Diagnose:", [
        widgets.choice("Profile a fine-tune (where does the time go?)", "profile"),
        widgets.choice("Compare two runs (config check: env, versions, data, weights, seeds, config)", "compare"),
        widgets.choice("Precision compare, layer by layer (first module that drifts)", "precision"),
        widgets.choice("Back", BACK),
    ])
    if action is BACK:
        return None
    if action == "profile":
        return profile(session)
    if action == "compare":
        return compare(session)
    return precision(session)


def profile(session: MenuSession):
    from menus.flows import FLOWS, Flow, run_flow

    sft = FLOWS["sft"]
    profiled = Flow("sft", "Profile a fine-tune", sft.questions,
                    lambda state: {**sft.step(state), "profile": {"wait": 1, "warmup": 1, "active": 3}})
    return run_flow(session, profiled)


def compare(session: MenuSession) -> None:
    from swiftbox.diagnose import compare_cli
    from swiftbox.errors import SwiftboxError

    a = widgets.path("Run A (artifact or runs/<name> directory):", validate=check_dir, only_directories=True)
    if a is BACK:
        return
    b = widgets.path("Run B:", validate=check_dir, only_directories=True)
    if b is BACK:
        return
    try:
        code = compare_cli(a, b, [])
        session.echo("  all checks pass" if code == 0 else "  the runs differ (see the table)")
    except SwiftboxError as exc:
        session.echo("  ! " + " ".join(str(exc).split()))
    widgets.pause()


def precision(session: MenuSession) -> None:
    from swiftbox.diagnose import precision_cli
    from swiftbox.errors import SwiftboxError

    a = widgets.text("Side A (model@device:dtype):", default="toy@cpu:float32")
    if a is BACK:
        return
    b = widgets.text("Side B (model@device:dtype):", default="toy@cpu:bfloat16")
    if b is BACK:
        return
    session.echo("  loading both sides and comparing every module ...")
    try:
        precision_cli(a, b, [])
    except SwiftboxError as exc:
        session.echo("  ! " + " ".join(str(exc).split()))
    widgets.pause()

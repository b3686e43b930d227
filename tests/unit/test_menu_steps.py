"""The menu covers the step kinds: every kind in swiftbox.steps.STEP_TYPES has a menu flow reachable from the main
menu or the Align screen, or a named exclusion (menus/flows.py NOT_IN_MENU) saying why; and the main menu's Align
title names every method the Align screen offers."""
from __future__ import annotations

from menus import align, main
from menus.flows import FLOWS, NOT_IN_MENU
from swiftbox.steps import STEP_TYPES


def test_every_step_kind_has_a_flow_or_a_named_exclusion():
    missing = sorted(k for k in STEP_TYPES if k not in FLOWS and k not in NOT_IN_MENU)
    assert missing == [], f"step kinds with no menu flow and no NOT_IN_MENU entry: {missing}"
    assert not set(FLOWS) & set(NOT_IN_MENU)
    assert all(isinstance(why, str) and len(why) > 20 for why in NOT_IN_MENU.values())
    assert set(FLOWS) | set(NOT_IN_MENU) <= set(STEP_TYPES), "a flow or exclusion for a kind that is no step"


def test_every_flow_builds_its_own_kind_and_is_reachable():
    assert all(flow.kind == kind for kind, flow in FLOWS.items())
    reachable = {value for value, _ in main.ITEMS} | {kind for kind, _ in align.ALIGN}
    assert sorted(set(FLOWS) - reachable) == []


def test_the_align_title_names_every_method_on_the_align_screen():
    title = dict(main.ITEMS)["align"].lower()
    for kind, entry in align.ALIGN:
        name = entry.split("   ")[0].strip().lower()      # "DPO", "SimPO", "Reward model", "GRPO", "GKD"
        assert name in title, f"the main menu's Align title does not name {name} ({kind})"

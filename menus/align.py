"""The "Align" screen: one entry per alignment method, each opening its flow (menus/flows.py) with its few
questions. An entry the device cannot run is greyed with the reason (the flow's own `needs` / input refusal),
before any question. A new method is one more entry in ALIGN and one more Flow. This screen only picks: the main
menu (menus/main.py) runs the picked flow, so the two modules do not import each other.
"""
from __future__ import annotations

from typing import Optional

from menus import widgets
from menus.session import MenuSession
from menus.widgets import BACK

ALIGN = [  # (step kind, title): the kinds are keys of menus.flows.FLOWS
    ("dpo", "DPO      preference pairs, against a frozen reference (the SFT policy)"),
    ("kto", "KTO      single replies marked good or bad; no pairs needed"),
    ("orpo", "ORPO     preference pairs; SFT and preference in one step, no reference model"),
    ("simpo", "SimPO    preference pairs; length-normalised margin, no reference model"),
    ("rm", "Reward model   learns to score replies from preference pairs (GRPO can use it)"),
    ("grpo", "GRPO     questions with checkable answers; rewards from rules, your function or a reward model"),
    ("gkd", "GKD      distil a teacher model (same tokenizer) into this one, on its own answers too"),
]


def choices(session: MenuSession, carry: Optional[str] = None) -> list:
    from menus.flows import FLOWS, refusal

    out = [widgets.choice(title, kind, disabled=refusal(session, FLOWS[kind], carry)) for kind, title in ALIGN]
    return out + [widgets.choice("Back", BACK)]


def align(session: MenuSession, carry: Optional[str] = None) -> Optional[str]:
    """The step kind picked on the Align screen (None: Back)."""
    answer = widgets.select("Align: which method?", choices(session, carry))
    return None if answer is BACK else str(answer)

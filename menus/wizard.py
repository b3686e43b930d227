"""A flow is a list of questions asked in order; Esc on one goes back to the one before it.

Each question is `(key, ask)` where `ask(state)` returns the answer, BACK, or `Auto(value)` for a
question that needs no asking (e.g. the model carried forward from the step before). Auto answers
are not stops on the way back. Answers are kept in `state`, so a question asked again offers the
previous answer as its default.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from menus.widgets import BACK


@dataclass
class Auto:
    value: Any


Question = tuple[str, Callable[[dict], Any]]


def run_wizard(questions: Sequence[Question], state: dict) -> Any:
    """Ask `questions` in order; the filled `state`, or BACK when Esc leaves the first question."""
    history: list[int] = []
    i = 0
    while i < len(questions):
        key, ask = questions[i]
        answer = ask(state)
        if answer is BACK:
            if not history:
                return BACK
            i = history.pop()
            continue
        if isinstance(answer, Auto):
            state[key] = answer.value
        else:
            state[key] = answer
            history.append(i)
        i += 1
    return state

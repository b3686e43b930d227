"""The GRPO questions of the Align screen's GRPO flow (menus.flows.GRPO): the reward - a built-in rule or a
function in the user's Python file, checked as it is typed - and the step settings built from the answers."""
from __future__ import annotations

from typing import Any, Union

from menus import widgets
from menus.session import MenuSession
from swiftbox.reward_spec import BUILTIN_REWARDS as BUILTIN

OTHER = "__python__"
# the built-in rewards the menu offers, as their records say (swiftbox/reward_spec.py), then the user's own function
BUILTIN_REWARDS = [
    *((f"{r.kind:<10} {r.description}", r.menu_spec) for r in BUILTIN if r.menu_spec),
    ("A function in my own Python file (file.py:function)", OTHER),
]


def check_user_reward(raw: str) -> Union[bool, str]:
    """True when `raw` names an importable function, else the one-line reason (shown under the prompt)."""
    from swiftbox.errors import UserError
    from swiftbox.training import check_spec, parse_spec

    try:
        spec = parse_spec(raw.strip())
        if spec.kind != "python":
            return "expected path/to/rewards.py:function"
        check_spec(spec)
    except (ValueError, UserError) as exc:
        return str(exc)
    return True


def reward(session: MenuSession):
    def ask(state: dict) -> Any:
        choices = [widgets.choice(title, value) for title, value in BUILTIN_REWARDS]
        answer = widgets.select("Reward (what makes an answer good):", choices, default=state.get("reward", "exact"))
        if answer is not OTHER:
            return answer
        typed = widgets.path("Python file and function (path/to/rewards.py:function):", validate=check_user_reward)
        return typed
    return ask

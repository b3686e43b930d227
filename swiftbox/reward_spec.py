"""The syntax of a GRPO reward spec (`exact`, `regex:PATTERN`, `format:<TAG>`, `FILE.py:function`, `model:DIR`):
parsed where the step schema validates a recipe (swiftbox/steps.py), so a bad spec is exit 2 before any work.
What a spec does (checks on disk, the TRL callables) is swiftbox/training/rewards.py.

The built-in rewards are records (`BUILTIN_REWARDS`): how a recipe writes each, what it rewards, whether it needs
reference answers and what the menu offers - read by the parser, training/rewards.py and menus/grpo_flow.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class BuiltinReward:
    kind: str                       # RewardSpec.kind (training/rewards.py builds its function by it)
    form: str                       # how a recipe writes it: exact | regex:PATTERN | format:<TAG>
    description: str                # what it rewards, one line (the menu shows it)
    needs_reference: bool = False   # every row must carry a reference answer
    menu_spec: Optional[str] = None  # the spec the menu's choice writes (None: not offered there)


BUILTIN_REWARDS: tuple[BuiltinReward, ...] = (
    BuiltinReward("exact", "exact", "the answer equals the reference", True, "exact"),
    BuiltinReward("contains", "contains", "the answer contains the reference", True, "contains"),
    BuiltinReward("choice", "choice", "the first option the answer names is the reference (yes/no, A-D)", True,
                  "choice"),
    BuiltinReward("length", "length", "no penalty within the length budget, a growing one in its last quarter "
                  "(TRL's soft overlong punishment)"),
    BuiltinReward("regex", "regex:PATTERN", "the pattern matches (with a group: the group equals the reference)"),
    BuiltinReward("format", "format:<TAG>", "<think>...</think> then the answer", menu_spec="format:<think>"),
)
SIMPLE = tuple(r.kind for r in BUILTIN_REWARDS if r.form == r.kind)      # written as the bare name
NEEDS_REFERENCE = tuple(r.kind for r in BUILTIN_REWARDS if r.needs_reference)
FORMS = " | ".join([*(r.form for r in BUILTIN_REWARDS), "path/to/file.py:function", "model:DIR"])
TAG_RE = re.compile(r"^[A-Za-z_][\w-]*$")


@dataclass(frozen=True)
class RewardSpec:
    text: str               # as written in the recipe
    kind: str               # exact | contains | choice | length | regex | format | python | model
    arg: str = ""           # regex pattern, format tag, python file or model directory
    function: str = ""      # python: the function's name

    @property
    def name(self) -> str:
        """The name TRL logs the reward under (rewards/<name>/mean)."""
        return {"regex": "regex", "format": f"format_{self.arg}", "python": self.function,
                "model": "reward_model"}.get(self.kind, self.kind)


def parse_spec(text: str) -> RewardSpec:
    """One reward spec; ValueError (exit 2 through the schema) naming what is expected."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"empty reward; expected {FORMS}")
    text = text.strip()
    if text in SIMPLE:
        return RewardSpec(text, text)
    head, sep, rest = text.partition(":")
    if sep and head == "regex":
        try:
            compiled = re.compile(rest)
        except re.error as exc:
            raise ValueError(f"reward {text!r}: not a regular expression ({exc})") from None
        if not rest:
            raise ValueError(f"reward {text!r}: empty pattern; expected regex:PATTERN")
        if compiled.groups > 1:
            raise ValueError(f"reward {text!r}: at most one group (the answer compared with the reference)")
        return RewardSpec(text, "regex", rest)
    if sep and head == "format":
        tag = rest.strip().rstrip(".…").strip().lstrip("<").rstrip(">")
        if not TAG_RE.match(tag):
            raise ValueError(f"reward {text!r}: expected format:<TAG> such as format:<think>")
        return RewardSpec(text, "format", tag)
    if sep and head == "model":
        if not rest.strip():
            raise ValueError(f"reward {text!r}: expected model:DIR, a reward model from the rm step")
        return RewardSpec(text, "model", rest.strip())
    file, sep, function = text.rpartition(":")
    if sep and file.endswith(".py"):
        if not function.isidentifier():
            raise ValueError(f"reward {text!r}: {function!r} is not a Python function name; expected FILE.py:function")
        return RewardSpec(text, "python", file, function)
    raise ValueError(f"unknown reward {text!r}; expected {FORMS}")

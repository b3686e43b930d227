"""The chat-template switches a conversation may set (`chat_template_kwargs`): one allow-list, each switch with its
type, for the server's requests (serving/template_kwargs.py adds the client's own template), for training rows and for
the training steps' `chat_template_kwargs` (steps.py: the defaults of every row of the step). It sits with the step
contract, below the data layer, so the schema refuses a bad switch before any step runs.

Only the switches the preset families' templates read (tests/fixtures/templates) are taken: a key a template does not
read would be silently ignored by it, and a key such as `messages`, `tools`, `add_generation_prompt`, `tokenize` would
overwrite what swiftbox renders. A training row's unknown or ill-typed switch is bad input: one line naming
`chat_template_kwargs.KEY` (exit 2). The same switches reach training and generation, so a row rendered with
`enable_thinking: false` trains on the text the model is prompted with when served with it.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional

NAME = re.compile(r"^[\w.-]{1,64}$")
Check = Callable[[Any], Optional[str]]


def flag(value: Any) -> Optional[str]:
    return None if isinstance(value, bool) else "expected true or false"


def text(limit: int) -> Check:
    def check(value: Any) -> Optional[str]:
        ok = isinstance(value, str) and len(value) <= limit
        return None if ok else f"expected a string of at most {limit} characters"
    return check


def one_of(*choices: str) -> Check:
    def check(value: Any) -> Optional[str]:
        return None if value in choices else f"expected one of {', '.join(choices)}"
    return check


def names(value: Any) -> Optional[str]:
    ok = isinstance(value, list) and len(value) <= 16 and all(isinstance(v, str) and NAME.match(v) for v in value)
    return None if ok else "expected a list of at most 16 tool names"


SWITCHES: dict[str, Check] = {
    "enable_thinking": flag,          # Qwen3, Qwen3.5, SmolLM3, Gemma 4, GLM, Nemotron 3, DeepSeek-V4: think first
    "thinking": flag,                 # DeepSeek-V3.1, DeepSeek-V4
    "preserve_thinking": flag,        # Gemma 4, LFM2.5: keep earlier turns' reasoning
    "add_vision_id": flag,            # Qwen3.5
    "tools_in_user_message": flag,    # Llama 3.x: tool schemas in the first user turn
    "reasoning_effort": one_of("low", "medium", "high", "max", "no_think"),   # gpt-oss; DeepSeek-V4 max; Hunyuan 3
    "date_string": text(64),          # Llama 3.x: "Today Date: ..."
    "model_identity": text(2000),     # gpt-oss: the system identity line
    "builtin_tools": names,           # Llama 3.1 (brave_search, wolfram_alpha...), gpt-oss (browser, python)
}


def fault(value: Any, allowed: Optional[dict[str, Check]] = None) -> Optional[tuple[str, str]]:
    """(key, why) of the first switch in `value` that is not taken or not of its type; ('', why) when `value` is not
    an object; None when every switch is fine."""
    allowed = SWITCHES if allowed is None else allowed
    if not isinstance(value, dict):
        return "", "expected an object of template switches"
    for key, item in value.items():
        check = allowed.get(key)
        if check is None:
            taken = ", ".join(k for k in allowed if k != "chat_template")
            return str(key)[:80], (f"not a template switch swiftbox takes (it takes {taken}; the messages, tools and "
                                   "rendering options come from the conversation itself)")
        why = check(item)
        if why:
            return str(key), why
    return None


def checked(value: Any, what: str = "chat_template_kwargs") -> Optional[dict[str, Any]]:
    """A row's `chat_template_kwargs` (None when absent), or ValueError naming the switch at fault (the data
    readers turn it into one line, exit 2)."""
    if value is None:
        return None
    bad = fault(value)
    if bad is not None:
        key, why = bad
        raise ValueError(f"{what}{'.' + key if key else ''}: {why}")
    return dict(value)

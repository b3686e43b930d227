"""A time and output-size budget for chat-template renders: every render (data.render.render, the template's
dialect probe, verify's start-up check) runs inside `budget(...)`.

- Time: a trace function (`sys.settrace`, this thread only, and only while jinja runs the template: it is set
  inside the template's `concat`, compat.chat_template_traced) watches the frames of jinja's compiled template
  code (file name `<template>`) and raises `TemplateOverBudget` once the render has taken
  more than `seconds` - inside the template's own loops, so `{% for i in range(99999) %}{% for j in range(99999) %}`
  stops within the budget instead of running for hours. Other code called from the template (filters, Python
  functions) is not traced (the global trace function returns None for it), which keeps the cost on a normal
  render small (measured in tests/unit/test_template_budget.py). The exception is raised on the rendering thread
  between two template lines: the event loop, another request's thread and signal handlers are never waited on
  for longer than the budget.
- Size: unless the caller already capped the output (the server caps a request's rendering at what its context can
  take), the output is capped at `max_chars` with compat.chat_template_output_capped, so a template that prints
  300 MB stops at the cap. Under the same cap one expression cannot build a value past it either (`'x' * 10**9`,
  `10 ** 10**9`, a `%` / `format` width, `'x'|center(10**9)`): the template compiles in compat's sized sandbox, which
  refuses it before it exists, in well under a second and without the gigabyte (tests/unit/test_template_budget.py).
  A string doubled with `~` in a loop is bounded by the time budget only.

`TemplateOverBudget` is a UserError (exit 2 on the command line; the server answers 400) naming the template.
The defaults can be changed with SWIFTBOX_TEMPLATE_SECONDS and SWIFTBOX_TEMPLATE_MAX_CHARS.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any, Iterator, Optional

from swiftbox.errors import UserError

DEFAULT_SECONDS = 10.0
DEFAULT_MAX_CHARS = 8 << 20
TEMPLATE_FILE = "<template>"      # jinja compiles templates made from a string under this file name
CHECK_EVERY = 64                  # trace events between two clock reads


class TemplateOverBudget(UserError):
    """A chat template's rendering took longer than its budget and was stopped."""

    def __init__(self, name: str, seconds: float):
        super().__init__(f"the chat template of {name} took more than {seconds:g} s to render and was stopped (a loop "
                         "that does not end on this input?); fix the template, or raise SWIFTBOX_TEMPLATE_SECONDS")
        self.seconds = seconds


def seconds_budget() -> float:
    return _env_number("SWIFTBOX_TEMPLATE_SECONDS", DEFAULT_SECONDS)


def chars_budget() -> int:
    return int(_env_number("SWIFTBOX_TEMPLATE_MAX_CHARS", DEFAULT_MAX_CHARS))


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"{name}={raw!r}: expected a positive number") from None
    if not value > 0:
        raise UserError(f"{name}={raw!r}: expected a positive number")
    return value


class Budget:
    """One render's clock (the trace functions); `exceeded` stays set once the deadline passed."""

    def __init__(self, name: str, seconds: float):
        self.name, self.seconds = name, seconds
        self.deadline = time.monotonic() + seconds
        self.exceeded = False
        self._count = 0

    def on_call(self, frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename != TEMPLATE_FILE:
            return None                  # not template code: not traced line by line
        self._check()
        return self.on_line

    def on_line(self, frame: Any, event: str, arg: Any) -> Any:
        self._count += 1
        if self._count >= CHECK_EVERY:
            self._count = 0
            self._check()
        return self.on_line

    def _check(self) -> None:
        if self.exceeded or time.monotonic() > self.deadline:
            self.exceeded = True
            raise TemplateOverBudget(self.name, self.seconds)


@contextlib.contextmanager
def budget(name: str, templates: Optional[list[str]] = None, *, seconds: Optional[float] = None,
           max_chars: Optional[int] = None) -> Iterator[Budget]:
    """Render `templates` (the template sources that may run; their output is capped) within the budget."""
    from swiftbox.compat import (
        TemplateOutputTooLong,
        _render_limit,
        chat_template_output_capped,
        chat_template_traced,
    )

    clock = Budget(name, seconds if seconds is not None else seconds_budget())
    previous = sys.gettrace()
    ours = bool(templates) and _render_limit().get() is None      # a tighter cap from the caller stays theirs
    limit = max_chars or chars_budget()
    try:
        with contextlib.ExitStack() as stack:
            if ours:
                stack.enter_context(chat_template_output_capped(list(templates or []), limit))
            if previous is None and templates:   # a debugger / coverage tracer is left alone (no clock under it)
                stack.enter_context(chat_template_traced(list(templates), clock.on_call))
            yield clock
    except TemplateOutputTooLong:
        if not ours:
            raise                        # the caller's cap: the caller says what it means
        raise UserError(f"the chat template of {name} printed more than {limit} characters and was stopped; fix "
                        "the template, or raise SWIFTBOX_TEMPLATE_MAX_CHARS") from None


def template_sources(tokenizer: Any, override: Optional[str] = None) -> list[str]:
    """The template strings a render of `tokenizer` may use (a dict of named templates on some tokenizers)."""
    if override is not None:
        return [override]
    found = getattr(tokenizer, "chat_template", None)
    if isinstance(found, dict):
        return [t for t in found.values() if isinstance(t, str)]
    return [found] if isinstance(found, str) else []

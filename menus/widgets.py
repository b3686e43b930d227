"""Prompt wrappers over questionary with the behaviour the menu promises everywhere.

- Esc answers BACK (the caller goes up one level).
- Ctrl-C raises ToMain (the main loop returns to the main menu; Ctrl-C there quits).
- A disabled choice can never come back as an answer, even through type-to-filter.
- Long lists get type-to-filter; free text is validated as it is typed.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Sequence, Union

import questionary
from prompt_toolkit.key_binding import KeyBindings, merge_key_bindings
from prompt_toolkit.keys import Keys
from questionary import Choice, Separator


class _Back:
    def __repr__(self) -> str:
        return "BACK"


BACK = _Back()  # answer of any prompt left with Esc


class ToMain(Exception):
    """Ctrl-C inside a flow: abandon it and return to the main menu."""


STYLE = questionary.Style([
    ("qmark", "fg:#5f87ff bold"),
    ("question", "bold"),
    ("pointer", "fg:#5fd7ff bold"),
    ("highlighted", "fg:#5fd7ff bold"),
    ("selected", "fg:#5fd7ff noreverse"),
    ("disabled", "fg:#808080 italic"),
    ("instruction", "fg:#808080"),
    ("answer", "fg:#87d787 bold"),
])

FILTER_MIN = 6  # lists at least this long get type-to-filter


class LiveText:
    """A prompt message that is re-read on every repaint (questionary formats the message per render).

    `answered` is what stays in the scrollback once the prompt is answered (default: the live text).
    """

    def __init__(self, fn: Callable[[], str], answered: Optional[Callable[[], str]] = None):
        self.fn, self.answered, self.app = fn, answered, None

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __str__(self) -> str:
        if self.answered is not None and self.app is not None and self.app.is_done:
            return self.answered()
        return self.fn()


def _with_escape(question: questionary.Question) -> questionary.Question:
    extra = KeyBindings()

    @extra.add(Keys.Escape, eager=True)
    def _(event):
        event.app.exit(result=BACK)

    app = question.application
    app.key_bindings = merge_key_bindings([app.key_bindings, extra]) if app.key_bindings else extra
    return question


def ask(question: questionary.Question) -> Any:
    """Run a prompt: BACK on Esc, ToMain on Ctrl-C, the answer otherwise."""
    try:
        return _with_escape(question).unsafe_ask()
    except KeyboardInterrupt:
        raise ToMain() from None
    except EOFError:  # stdin closed: nothing more will ever be typed
        raise ToMain() from None


def choice(title: str, value: Any = None, disabled: Optional[str] = None, description: Optional[str] = None) -> Choice:
    """A questionary Choice; `disabled` is the reason shown beside a choice that cannot be taken."""
    return Choice(title=title, value=title if value is None else value, disabled=disabled or None,
                  description=description)


def select(message: Union[str, LiveText], choices: Sequence[Union[Choice, Separator, str]], default: Any = None,
           instruction: Optional[str] = None, on_paint: Optional[Callable[[], None]] = None, **kwargs) -> Any:
    """Arrow keys always; type-to-filter on long lists. Returns the choice value or BACK.

    `on_paint` runs after each repaint (the main menu starts its device probe there, after the first paint).
    """
    choices = [Choice(c, value=c) if isinstance(c, str) else c for c in choices]
    enabled = [c for c in choices if isinstance(c, Choice) and not c.disabled]
    if not enabled:
        raise ValueError(f"{message}: no choice can be taken")
    values = [c.value for c in enabled]
    if default is not None and default not in values:
        default = None
    default_choice = next((c for c in enabled if c.value == default), None) if default is not None else None
    searchable = len(choices) >= FILTER_MIN
    while True:
        question = questionary.select(
            message, choices=choices, default=default_choice, style=STYLE, use_search_filter=searchable,
            use_jk_keys=False, use_shortcuts=False, instruction=instruction, **kwargs)
        if on_paint is not None:
            question.application.after_render += lambda app: on_paint()
        if isinstance(message, LiveText):
            message.app = question.application
        answer = ask(question)
        if answer is BACK or answer in values:
            return answer
        # only reachable when filtering left the pointer on a disabled entry: ask again


def text(message: str, default: str = "", validate: Optional[Callable[[str], Union[bool, str]]] = None,
         completer: Optional[Iterable[str]] = None, password: bool = False) -> Any:
    """A line of text (stripped) or BACK. `validate` returns True or the message to show."""
    if password:
        q = questionary.password(message, default=default, validate=validate, style=STYLE)
    elif completer:
        q = questionary.autocomplete(message, choices=list(completer), default=default, validate=validate,
                                     style=STYLE, match_middle=True)
    else:
        q = questionary.text(message, default=default, validate=validate, style=STYLE)
    answer = ask(q)
    return answer if answer is BACK else answer.strip()


def path(message: str, default: str = "", validate: Optional[Callable[[str], Union[bool, str]]] = None,
         only_directories: bool = False) -> Any:
    """A filesystem path with Tab completion, or BACK."""
    answer = ask(questionary.path(message, default=default, validate=validate, style=STYLE,
                                  only_directories=only_directories))
    return answer if answer is BACK else answer.strip()


def confirm(message: str, default: bool = True) -> Any:
    return ask(questionary.confirm(message, default=default, style=STYLE))


def pause(message: str = "Press Enter to go back to the menu") -> None:
    """Wait for Enter (Esc too); Ctrl-C still means 'main menu'."""
    ask(questionary.text(message, style=STYLE, qmark="·"))


def number(message: str, default, kind: type = int, low=None, high=None) -> Any:
    """An int or float typed as text, checked against [low, high]."""

    def check(raw: str):
        try:
            value = kind(raw)
        except ValueError:
            return f"expected {'a whole number' if kind is int else 'a number'}"
        if low is not None and value < low:
            return f"must be at least {low}"
        if high is not None and value > high:
            return f"must be at most {high}"
        return True

    answer = text(message, default=str(default), validate=check)
    return answer if answer is BACK else kind(answer)

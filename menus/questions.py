"""The questions flows are made of: model, dataset, method, numbers, output. Each returns `ask(state)`.

Defaults come from the step schemas (swiftbox.steps), the model registry and the platform; an answer
given before (the user went back) is the next default.
"""
from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from menus import artifacts, datasets, registry, widgets
from menus.session import MenuSession
from menus.widgets import BACK, Separator
from menus.wizard import Auto

OTHER = "__other__"
METHODS = {
    "lora": "LoRA   low-rank adapter; the usual choice",
    "qlora": "QLoRA  LoRA on a 4-bit base; least memory",
    "dora": "DoRA   weight-decomposed LoRA; a little better, a little slower",
    "full": "Full   update every weight; most memory, no adapter",
}


def schema_default(kind: str, name: str, sub: Optional[str] = None) -> Any:
    from swiftbox.steps import STEP_TYPES

    field = STEP_TYPES[kind].model_fields[name]
    value = field.default_factory() if field.default_factory else field.default
    return getattr(value, sub) if sub else value


def recipe_name(kind: str, model: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", Path(str(model).rstrip("/")).name.lower()).strip("-")[:24] or "model"
    return f"{kind}-{slug}-{datetime.now().strftime('%m%d-%H%M%S')}"


def check_model_ref(raw: str):
    ref = raw.strip()
    if not ref:
        return "type a model: toy, a ModelScope id (ORG/NAME), hf:ORG/NAME or a local directory"
    if " " in ref:
        return "a model reference has no spaces"
    local = Path(ref).expanduser()
    if local.exists():
        return True if local.is_dir() else f"{ref}: not a directory"
    if ref.startswith(("/", ".", "~")):
        return f"{ref}: no such directory"
    name = ref[3:] if ref.startswith("hf:") else ref
    if ref != registry.TOY and not re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        return "expected ORG/NAME (ModelScope), hf:ORG/NAME, a local directory or toy"
    return True


def model(session: MenuSession, message: str = "Model:", types: Iterable[str] = ("model", "adapter"),
          presets: bool = True, task: Optional[str] = None) -> Callable[[dict], Any]:
    """Recent artifacts of `types` (those `task` cannot take greyed out with the reason), then toy and the
    registry's presets, then free text."""
    types = tuple(types)

    def ask(state: dict):
        if state.get("carry"):
            return Auto(state["carry"])
        choices: list = []
        recent = artifacts.recent(session.runs_dir, types)
        if recent:
            choices.append(Separator("── recent outputs (runs/) ──"))
            choices += [widgets.choice(a.title, a.path, disabled=artifacts.refusal(a, task)) for a in recent]
        options = registry.model_options() if presets else []
        if options:
            choices.append(Separator("── models ──"))
            choices += [widgets.choice(o.title, o.ref) for o in options]
        other = "Other: a ModelScope id, hf:ORG/NAME or a local directory" if presets else "Other: a directory"
        choices.append(widgets.choice(other, OTHER))
        first = next(c.value for c in choices if not isinstance(c, Separator) and not c.disabled)
        while True:
            answer = widgets.select(message, choices, default=state.get("model") or first)
            if answer != OTHER:
                return answer
            typed = widgets.text("Model reference:", default=state.get("model") or "", validate=check_model_ref,
                                 completer=[o.ref for o in options] or None)
            if typed is not BACK:
                return typed

    return ask


def dataset(session: MenuSession, kind: str, message: str = "Dataset:", optional: Optional[str] = None,
            key: str = "dataset"):
    """Bundled files for `kind`, or a path validated as it is typed; `optional` titles a 'none' choice; `key` is
    the answer's key in the state (its previous value is the default)."""

    def ask(state: dict):
        previous = state.get(key)
        files = datasets.bundled(kind)
        choices = [widgets.choice(f"{f}  (bundled)", f) for f in files]
        if optional:
            choices.insert(0, widgets.choice(optional, ""))
        choices.append(widgets.choice("A file of my own (jsonl / json / parquet)", OTHER))
        while True:
            answer = widgets.select(message, choices, default=previous if previous in files else None)
            if answer is BACK:
                return BACK
            if answer != OTHER:
                return answer or None
            typed = widgets.path("Dataset file:", default=previous if previous and previous not in files else "",
                                 validate=lambda raw: datasets.check(kind, raw))
            if typed is not BACK:
                return typed

    return ask


def method(session: MenuSession, kind: str):
    """LoRA / QLoRA / DoRA / full, with the registry's memory estimate; QLoRA disabled where it cannot run."""

    def ask(state: dict):
        facts = session.probe.facts()
        ref = state.get("model") or ""
        dtype = facts.dtype if facts else "auto"
        choices, refused = [], set()
        for name, title in METHODS.items():
            why = facts.why_not("qlora-bnb") if (facts and name == "qlora") else None
            if why:
                refused.add(name)
            choices.append(widgets.choice(title + memory_note(ref, name, dtype, facts), name, disabled=why))
        default = state.get("method") or fitting_method(ref, dtype, facts, refused, schema_default(kind, "method"))
        return widgets.select("Method:", choices, default=default)

    return ask


def fitting_method(ref: str, dtype: str, facts, refused: set, preferred: str) -> str:
    """`preferred` (LoRA), unless the registry says it will not fit this device and QLoRA would."""
    if not facts or not facts.memory_gib:
        return preferred
    need = registry.memory_estimate(ref, preferred, dtype)
    if need is None or need <= facts.memory_gib:
        return preferred
    small = registry.memory_estimate(ref, "qlora", dtype)
    if "qlora" not in refused and small is not None and small <= facts.memory_gib:
        return "qlora"
    return preferred


def memory_note(ref: str, method_name: str, dtype: str, facts) -> str:
    if ref == registry.TOY:
        return "  (toy: well under 1 GiB)"
    gib = registry.memory_estimate(ref, method_name, dtype)
    if gib is None:
        return ""
    note = f"  (≈ {gib:.1f} GiB)"
    if facts and facts.memory_gib and gib > facts.memory_gib:
        note += f"  more than this {facts.name}'s {facts.memory_gib:.0f} GiB"
    return note


def lora_rank(kind: str):
    def ask(state: dict):
        if state.get("method") == "full":
            return Auto(None)
        return widgets.number("LoRA rank:", state.get("rank") or schema_default(kind, "lora", "rank"), int, 1, 4096)

    return ask


def number(key: str, message: str, kind: str, field: str, cast: type = float, low=None, high=None):
    def ask(state: dict):
        default = state.get(key)
        if default is None:
            default = schema_default(kind, field)
        return widgets.number(message, default, cast, low, high)

    return ask


def output(session: MenuSession, kind: str):
    """Where the result goes; the default is runs/<recipe name>/<step>, the runner's own default."""

    def ask(state: dict):
        if not state.get("name"):
            state["name"] = recipe_name(kind, state.get("model") or kind)
        default = default_output(session, state["name"], kind)
        return widgets.path("Output directory:", default=state.get("output") or default, only_directories=True,
                            validate=lambda raw: bool(raw.strip()) or "type a directory")

    return ask


def default_output(session: MenuSession, name: str, kind: str) -> str:
    return os.path.join(str(session.runs_dir), name, kind)


def pick(message: str, key: str, options: list, default: Any = None):
    """A fixed list of (title, value[, disabled reason]) options."""

    def ask(state: dict):
        choices = [widgets.choice(o[0], o[1], disabled=o[2] if len(o) > 2 else None) for o in options]
        return widgets.select(message, choices, default=state.get(key, default))

    return ask

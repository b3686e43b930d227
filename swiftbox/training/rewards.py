"""GRPO rewards named in a recipe: `rewards: [exact, "regex:^(yes|no)$", "my_rewards.py:score", "model:runs/x/rm"]`.

Three stages, so bad input is one line before any work:
- `parse_spec(text)` — syntax only, in swiftbox/reward_spec.py (the step schema calls it: a bad spec is exit 2
  at validation, and the schema sits below training);
- `check_spec(spec)` — what needs the disk: a user's Python file is imported (only when a recipe names it) and
  its function looked up; a reward model directory must exist (the pipeline's check, before `<out>.partial`);
- `build(...)` — the callables handed to `trl.GRPOTrainer(reward_funcs=...)`.

Every callable takes TRL's keyword arguments (`prompts`, `completions`, `completion_ids`, the dataset's
`solution` column = the reference answer, `log_metric`, ...) and returns one float per completion. Every result
is checked (length, finite numbers): a user's function that returns the wrong shape or NaN stops the run with
one line naming its file (exit 2). Built-ins wrap what TRL ships where it has it (`format:<think>` is
`trl.rewards.think_format_reward`, `length` is `trl.rewards.get_soft_overlong_punishment`).
"""
from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from swiftbox.data.answers import matches, normalise
from swiftbox.errors import UserError
from swiftbox.modeling.adapter_file import is_adapter_dir
from swiftbox.reward_spec import FORMS, NEEDS_REFERENCE, RewardSpec, parse_spec

__all__ = ["FORMS", "RewardSpec", "build", "check_spec", "load_function", "parse_spec"]

MAX_CHOICES = 26


def check_spec(spec: RewardSpec) -> None:
    """The checks that read the disk (the pipeline's check phase): UserError, one line."""
    if spec.kind == "python":
        load_function(spec)
    elif spec.kind == "model":
        path = Path(spec.arg).expanduser()
        if not (path / "config.json").is_file() and not is_adapter_dir(path):
            raise UserError(f"reward {spec.text}: {spec.arg} is not a model directory (no config.json); expected the "
                            "output of an rm step")


def load_function(spec: RewardSpec) -> Callable:
    """Import the user's file (by path, as its own module) and return the named function."""
    path = Path(spec.arg).expanduser()
    if not path.is_file():
        raise UserError(f"reward {spec.text}: file {spec.arg} not found")
    name = f"swiftbox_user_rewards_{abs(hash(str(path.resolve())))}"
    if name in sys.modules:
        module = sys.modules[name]
    else:
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise UserError(f"reward {spec.text}: cannot import {spec.arg} as Python")
        module = importlib.util.module_from_spec(loader_spec)
        try:
            loader_spec.loader.exec_module(module)
        except BaseException as exc:   # a user's file: SyntaxError, ImportError, SystemExit, anything
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            raise UserError(f"reward {spec.text}: importing {spec.arg} failed ({detail})") from None
        sys.modules[name] = module
    fn = getattr(module, spec.function, None)
    if fn is None:
        raise UserError(f"reward {spec.text}: {spec.arg} has no function {spec.function!r}")
    if not callable(fn):
        raise UserError(f"reward {spec.text}: {spec.arg}:{spec.function} is not callable")
    return fn


def build(specs: list[str], *, references: list[Optional[str]], max_completion_length: int,
          model_loader: Optional[Callable[[str], Callable]] = None) -> list[Checked]:
    """TRL reward callables, one per spec, each checked on every call; the first also logs `accuracy`
    (exact match against the reference) when the data has references."""
    parsed = [parse_spec(s) for s in specs]
    have = [r for r in references if r is not None]
    choices = sorted({normalise(r) for r in have})
    out = []
    for i, spec in enumerate(parsed):
        if spec.kind in NEEDS_REFERENCE and len(have) < len(references):
            raise UserError(f"reward {spec.text}: needs a reference answer in every row (the last assistant reply, "
                            f"or an answer / solution column); {len(references) - len(have)} row(s) have none")
        if spec.kind == "choice" and not 2 <= len(choices) <= MAX_CHOICES:
            raise UserError(f"reward choice: the references take {len(choices)} distinct value(s); expected 2 to "
                            f"{MAX_CHOICES} (multiple choice); use exact or contains")
        fn = _builtin(spec, choices, max_completion_length, model_loader)
        out.append(Checked(spec, fn, log_accuracy=i == 0 and bool(have)))
    return out


def _builtin(spec: RewardSpec, choices: list[str], max_len: int, model_loader) -> Callable:
    if spec.kind in ("exact", "contains"):
        how = spec.kind
        return lambda completions, solution, **kw: [float(matches(c, r, how)) for c, r in zip(completions, solution)]
    if spec.kind == "choice":
        return lambda completions, solution, **kw: [float(pick(c, choices) == normalise(r))
                                                    for c, r in zip(completions, solution)]
    if spec.kind == "length":
        from trl.rewards import get_soft_overlong_punishment

        return get_soft_overlong_punishment(max_completion_len=max_len, soft_punish_cache=max(1, max_len // 4))
    if spec.kind == "regex":
        return _regex(re.compile(spec.arg))
    if spec.kind == "format":
        return _format(spec.arg)
    if spec.kind == "python":
        return load_function(spec)
    if model_loader is None:
        raise UserError(f"reward {spec.text}: no reward-model scorer available")
    return model_loader(spec.arg)


def reward_model_scorer(path: str, platform: Any) -> Callable:
    """`model:DIR`: the rm step's reward model (swiftbox.training.reward_model), loaded on first use, scoring the
    prompt (already the generation-prompt render) + the completion as the template renders a reply."""
    loaded: list = []

    def reward_model(prompts, completions, **kwargs) -> list[float]:
        from swiftbox.data.encode import completion_text
        from swiftbox.training.reward_model import load

        if not loaded:
            loaded.append(load(path, platform=platform))
        rm = loaded[0]
        asked = [{"role": "user", "content": "?"}]
        return rm.score([p + completion_text(rm.tokenizer, asked, [{"role": "assistant", "content": c}])
                         for p, c in zip(prompts, completions)])

    return reward_model


def pick(completion: str, choices: list[str]) -> Optional[str]:
    """The choice the completion names first (whole words, case-insensitive), None when it names none."""
    text = normalise(completion)
    found = [(m.start(), c) for c in choices for m in [re.search(rf"(?<!\w){re.escape(c)}(?!\w)", text)] if m]
    return min(found)[1] if found else None


def _regex(pattern: re.Pattern) -> Callable:
    """1 when the pattern matches; with a group, 1 only when the group's text matches the reference."""
    def regex(completions, solution=None, **kw):
        out = []
        for k, c in enumerate(completions):
            m = pattern.search(c)
            if m is None:
                out.append(0.0)
            elif pattern.groups and solution is not None and solution[k] is not None:
                out.append(float(matches(m.group(1) or "", solution[k], "exact")))
            else:
                out.append(1.0)
        return out
    return regex


def _format(tag: str) -> Callable:
    """Completions shaped `<tag>...</tag>answer`; `think` is TRL's own think_format_reward."""
    if tag == "think":
        from trl.rewards import think_format_reward

        return lambda completions, **kw: think_format_reward([[{"content": c}] for c in completions])
    pattern = re.compile(rf"^<{tag}>(?!.*<{tag}>)(.*?)</{tag}>.*$", re.DOTALL | re.MULTILINE)
    return lambda completions, **kw: [1.0 if pattern.match(c) else 0.0 for c in completions]


class Checked:
    """A reward callable whose every result is one finite number (or None: TRL's "not applicable") per
    completion; anything else is the user's bad input: UserError naming the reward (its file)."""

    def __init__(self, spec: RewardSpec, fn: Callable, log_accuracy: bool = False):
        self.spec, self.fn, self.log_accuracy = spec, fn, log_accuracy
        self.__name__ = spec.name        # TRL logs rewards/<__name__>/mean and /std

    def __call__(self, prompts, completions, **kwargs) -> list[Optional[float]]:
        try:
            values = self.fn(prompts=prompts, completions=completions, **kwargs)
        except UserError:
            raise
        except Exception as exc:
            if self.spec.kind not in ("python", "model"):
                raise
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            raise UserError(f"reward {self.spec.text}: raised {detail}") from None
        out = self._validated(values, len(completions))
        log_metric = kwargs.get("log_metric")
        if self.log_accuracy and log_metric is not None and kwargs.get("solution") is not None:
            refs = kwargs["solution"]
            log_metric("accuracy", sum(matches(c, r, "exact") for c, r in zip(completions, refs)) / len(refs))
        return out

    def _validated(self, values: Any, n: int) -> list[Optional[float]]:
        where = f"reward {self.spec.text}"
        if hasattr(values, "tolist"):       # numpy array / torch tensor
            values = values.tolist()
        if not isinstance(values, (list, tuple)):
            raise UserError(f"{where}: returned {type(values).__name__}; expected a list of {n} numbers, one per "
                            "completion")
        if len(values) != n:
            raise UserError(f"{where}: returned {len(values)} value(s) for {n} completions; expected one number "
                            "per completion")
        out: list[Optional[float]] = []
        for v in values:
            if v is None:
                out.append(None)
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                try:
                    v = float(v)
                except (TypeError, ValueError):
                    raise UserError(f"{where}: returned {type(v).__name__} {v!r:.60}; expected numbers") from None
            if not math.isfinite(v):
                raise UserError(f"{where}: returned {v}; rewards must be finite numbers")
            out.append(float(v))
        return out


def reference_scores(rewards: list[Checked], prompts: list[str], references: list[Optional[str]]) -> dict:
    """Each reward on the reference answers themselves (before training): catches a wrong shape or NaN before
    the first rollout, and says what a perfect answer scores."""
    rows = [(p, r) for p, r in zip(prompts, references) if r is not None][:8]
    if not rows:
        return {}
    kwargs = dict(prompts=[p for p, _ in rows], completions=[r for _, r in rows], solution=[r for _, r in rows],
                  completion_ids=[[0]] * len(rows), trainer_state=None, log_metric=lambda *a: None,
                  log_extra=lambda *a: None)
    out = {}
    for reward in rewards:
        values = [v for v in reward(**kwargs) if v is not None]
        if values:
            out[f"reference_reward/{reward.__name__}"] = round(sum(values) / len(values), 6)
    return out

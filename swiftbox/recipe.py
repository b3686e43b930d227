"""Recipes: load YAML (or a dict), apply `--set` overrides, validate into typed step configs.

Every way a recipe can be wrong ends in one UserError line naming the field and what is expected:
also YAML nested too deep, duplicate keys, and alias bombs (anchors that expand exponentially), which are
checked by walking each distinct object once and printed through reprlib, never expanded.
"""
from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from pydantic import Field, ValidationError

from swiftbox.device import DeviceChoice
from swiftbox.device.devices import DevicesField
from swiftbox.errors import UserError
from swiftbox.steps import STEP_TYPES, StepBase, Strict

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
MAX_DEPTH = 32          # a real recipe nests 4 levels; anything deeper is refused before validation


class RecipeHeader(Strict):
    name: str = Field(..., pattern=NAME_RE, description="recipe name; outputs go to runs/<name>/")
    model: Optional[str] = Field(None, description="the first step's input model")
    device: DeviceChoice = Field("auto", description="auto or a platform name")
    devices: Optional[DevicesField] = Field(None, description="default devices of the training steps: a count (2) or "
                                                              "ids ('0,1')")
    output_dir: Optional[str] = Field(None, description="default runs/<name>")
    description: Optional[str] = None


@dataclass
class Step:
    kind: str
    config: StepBase
    index: int


@dataclass
class Recipe:
    header: RecipeHeader
    steps: list[Step]
    source: str  # file path or "<dict>"

    @property
    def name(self) -> str:
        return self.header.name


def load_recipe(recipe: Union[str, Path, dict], overrides: Iterable[str] = ()) -> Recipe:
    source = "<dict>"
    if isinstance(recipe, (str, Path)):
        source = str(recipe)
        data = from_peer(read_yaml(Path(recipe)), source)
    else:
        data = recipe
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping with name, model and steps, got {type(data).__name__}")
    check_depth(data, source)
    data = apply_overrides(data, overrides)
    return validate_recipe(data, source)


def from_peer(data: Any, source: str) -> Any:
    """A LLaMA-Factory / Axolotl YAML or an ms-swift argument file, recognised by content, as a swiftbox recipe dict
    (swiftbox/migrate; what it ignores is printed as the run's first line); anything else unchanged."""
    check_depth(data, source)
    from swiftbox.migrate import import_config

    imported = import_config(data, source) if isinstance(data, dict) else None
    if imported is None:
        return data
    import sys

    print(f"swiftbox: {source}: {imported.header_line()}", file=sys.stderr, flush=True)
    return imported.recipe


def check_depth(data: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """Refuse nesting deeper than `limit`. Each distinct container is visited once, so a YAML alias bomb
    (the same list referenced 9 times at each of 9 levels) costs its number of objects, not 9**9."""
    seen: set[int] = set()
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list, tuple)) or id(node) in seen:
            continue
        if depth > limit:
            raise UserError(f"{where}: nested more than {limit} levels deep; a recipe needs a few")
        seen.add(id(node))
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)


def yaml_load(text: str) -> Any:
    """yaml.safe_load that refuses duplicate keys (YAML would silently keep the last one)."""
    import yaml

    return yaml.load(text, Loader=_unique_keys_loader())


_LOADER: Any = None


def _unique_keys_loader() -> Any:
    global _LOADER
    if _LOADER is None:
        import yaml

        class UniqueKeyLoader(yaml.SafeLoader):
            def construct_mapping(self, node: Any, deep: bool = False) -> Any:
                if isinstance(node, yaml.MappingNode):
                    seen = set()
                    for key_node, _ in node.value:
                        if key_node.tag == "tag:yaml.org,2002:merge":
                            continue
                        key = self.construct_object(key_node, deep=deep)
                        try:
                            duplicate = key in seen
                            seen.add(key)
                        except TypeError:
                            continue  # unhashable key: the base constructor reports it
                        if duplicate:
                            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                                    key_node.start_mark)
                return super().construct_mapping(node, deep=deep)

        _LOADER = UniqueKeyLoader
    return _LOADER


def read_yaml(path: Path) -> Any:
    import yaml

    if not path.is_file():
        raise UserError(f"{path}: recipe file not found")
    try:
        return yaml_load(path.read_text(encoding="utf-8-sig"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise UserError(f"{path}:{where} is not valid YAML ({problem})") from None
    except UnicodeError:
        raise UserError(f"{path}: not a UTF-8 text file") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to read; a recipe needs a few levels") from None
    except (ValueError, OverflowError) as exc:  # e.g. a timestamp like 2026-13-45 that YAML cannot build
        raise UserError(f"{path}: a value cannot be read ({_short(str(exc))})") from None


def validate_recipe(data: dict, source: str = "<dict>") -> Recipe:
    header_data = {k: v for k, v in data.items() if k != "steps"}
    try:
        header = RecipeHeader.model_validate(header_data)
    except ValidationError as exc:
        raise UserError(f"{source}: {format_validation_error(exc)}") from None
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise UserError(f"{source}: steps: expected a non-empty list like [{{sft: {{...}}}}, {{eval: {{}}}}]")
    steps = [parse_step(item, i, source) for i, item in enumerate(raw_steps)]
    check_step_references(steps, source)
    return Recipe(header=header, steps=steps, source=source)


def check_step_references(steps: list[Step], source: str = "<dict>") -> None:
    """A step's `model: @sft` (`@sft-2`: the second sft) must name an earlier step that produces a model: checked
    before any step runs (the runner resolves the name to wherever that step's output went)."""
    from swiftbox.pipelines import load_pipeline

    used: dict[str, int] = {}
    earlier: list[str] = []
    for step in steps:
        refs = [("model", step.config.model)] + [("compare", r) for r in getattr(step.config, "compare", None) or []]
        for field, ref in refs:
            if ref and ref.startswith("@") and ref[1:] not in earlier:
                known = ", ".join("@" + n for n in earlier) or "none"
                raise UserError(f"{source}: steps[{step.index}].{step.kind}.{field} {ref}: not an earlier step that "
                                f"produces a model (those before it: {known})")
        used[step.kind] = used.get(step.kind, 0) + 1
        if load_pipeline(step.kind).produces_model:
            earlier.append(step.kind if used[step.kind] == 1 else f"{step.kind}-{used[step.kind]}")


def parse_step(item: Any, index: int, source: str = "<dict>") -> Step:
    where = f"{source}: steps[{index}]"
    kinds = ", ".join(STEP_TYPES)
    if isinstance(item, str) and item in STEP_TYPES:
        item = {item: {}}
    if not isinstance(item, dict) or len(item) != 1:
        raise UserError(f"{where}: expected a mapping with one key, the step kind ({kinds})")
    kind, cfg = next(iter(item.items()))
    if kind not in STEP_TYPES:
        raise UserError(f"{where}: unknown step kind {kind!r}; expected one of {kinds}")
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, dict):
        raise UserError(f"{where}.{kind}: expected a mapping of settings, got {_short(cfg)}")
    try:
        config = STEP_TYPES[kind].model_validate(cfg)
    except ValidationError as exc:
        raise UserError(f"{where}.{kind}.{format_validation_error(exc)}") from None
    return Step(kind=kind, config=config, index=index)


def format_validation_error(exc: ValidationError) -> str:
    """pydantic's first error as 'field.path: what is expected (got X)'."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()) if not str(p).startswith("function-")) or "value"
    msg = err.get("msg", "invalid value").removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = "unknown setting"
    elif err.get("type") == "missing":
        msg = "required setting is missing"
    got = f" (got {_short(err['input'])})" if "input" in err and err.get("type") != "missing" else ""
    extra = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{loc}: {msg}{got}{extra}".replace("\n", " ")


_REPR = reprlib.Repr()   # Python 3.11 takes no keyword arguments here
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxtuple, _REPR.maxset = 3, 4, 4, 4, 4
_REPR.maxstring, _REPR.maxother = 50, 50


def _short(value: Any) -> str:
    """A bounded repr: reprlib never expands more than a few items of a few levels (alias bombs stay cheap)."""
    text = _REPR.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_OVERRIDE_RE = re.compile(r"^(?P<target>[A-Za-z_][\w-]*)(?:\[(?P<nth>\d+)\])?(?:\.(?P<path>[\w.]+))?$")


def apply_overrides(data: dict, overrides: Iterable[str]) -> dict:
    """Apply `step.key=value` / `step[n].key.sub=value` / `key=value` (recipe level).

    `sft.epochs=1` sets every sft step; `eval[2].limit=5` only the second eval step. Values are YAML.
    """
    import copy

    import yaml

    overrides = list(overrides)
    if not overrides:
        return data
    data = copy.deepcopy(data)
    for text in overrides:
        if "=" not in text:
            raise UserError(f"--set {_short(text)}: expected KEY=VALUE, e.g. sft.epochs=1")
        key, raw = text.split("=", 1)
        match = _OVERRIDE_RE.match(key.strip())
        if not match:
            raise UserError(f"--set {_short(text)}: expected step.key=value, step[n].key=value or key=value")
        try:
            value = yaml_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        except (RecursionError, ValueError, OverflowError):
            raise UserError(f"--set {_short(text)}: the value cannot be read (nested too deeply or malformed)") \
                from None
        check_depth(value, f"--set {_short(text)}")
        target, nth, path = match["target"], match["nth"], match["path"]
        if nth is not None and int(nth) < 1:
            raise UserError(f"--set {_short(text)}: step numbers count from 1 ({target}[1] is the first {target} step)")
        if target in STEP_TYPES and path:
            _set_on_steps(data, target, int(nth) if nth else None, path.split("."), value, text)
        elif nth is None and path is None and target != "steps":
            data[target] = value
        else:
            raise UserError(f"--set {_short(text)}: {target!r} is not a step kind ({', '.join(STEP_TYPES)})")
    return data


def _set_on_steps(data: dict, kind: str, nth: Optional[int], path: list[str], value: Any, text: str) -> None:
    steps = data.get("steps")
    if not isinstance(steps, list):
        raise UserError(f"--set {_short(text)}: the recipe has no steps list")
    hits = 0
    for i, item in enumerate(steps):
        if item == kind:                       # the short form `- eval` takes settings too
            item = steps[i] = {kind: {}}
        if isinstance(item, dict) and len(item) == 1 and kind in item:
            hits += 1
            if nth is not None and hits != nth:
                continue
            cfg = item[kind] if isinstance(item[kind], dict) else {}
            item[kind] = cfg
            node = cfg
            for part in path[:-1]:
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node = node[part]
            node[path[-1]] = value
    if hits == 0 or (nth is not None and nth > hits):
        raise UserError(f"--set {_short(text)}: the recipe has no {f'{kind}[{nth}]' if nth else kind} step")

"""`./launch.sh compare A B`: the config check between two runs, from their manifests (swiftbox.json).

Checks, section by section: environment (device, device name, dtype, threads, the env vars that matter),
library versions, dataset (content hash, rows, columns, sample size), initial weights (hash), random seeds
and the step config. Output paths, timings and metrics are results, not configuration, and are not checked;
paths of datasets and models are not either (their hashes are). A and B are artifact directories, or two
recipe run directories (runs/<name>, holding summary.json), compared step by step.

Exit 0: everything matches; 1: something differs (the table names it); 2: bad input.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from swiftbox.artifacts import MANIFEST, read_manifest
from swiftbox.diagnose.fingerprint import DATA_FIELDS
from swiftbox.errors import UserError

SECTIONS = ("environment", "versions", "dataset", "initial weights", "seeds", "config")
NOT_CONFIG = {"output", "force", "model", "resume", *DATA_FIELDS}   # results / paths / checked elsewhere
MISSING = "(not recorded)"


@dataclass
class Check:
    section: str
    item: str
    a: Any
    b: Any

    @property
    def ok(self) -> bool:
        return self.a == self.b


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def _pairs(section: str, a: Optional[dict], b: Optional[dict], skip=()) -> list[Check]:
    if a is None and b is None:
        return []
    a, b = flatten(a or {}), flatten(b or {})
    return [Check(section, key, a.get(key, MISSING), b.get(key, MISSING))
            for key in sorted(set(a) | set(b)) if key.split(".")[0] not in skip]


def _data(manifest: dict) -> Optional[dict]:
    data = manifest.get("data")
    if data is None:
        return None
    out = {}
    for field, entries in data.items():
        for i, entry in enumerate(entries):
            for key in ("sha256", "rows", "columns", "sample", "error"):
                if key in entry:
                    out[f"{field}[{i}].{key}"] = entry[key]
    return out


def _weights(manifest: dict) -> Optional[dict]:
    weights = manifest.get("initial_weights")
    if weights is None:
        return None
    return {k: weights[k] for k in ("sha256", "error") if k in weights}


def checks(a: dict, b: dict) -> list[Check]:
    """Every check between two manifests, in section order."""
    out = [Check("config", "step kind", a.get("kind"), b.get("kind"))]
    env_a = {"device": a.get("device"), "device_name": a.get("device_name"), "dtype": a.get("dtype"),
             "threads": a.get("threads", MISSING), **{f"env {k}": v for k, v in (a.get("env") or {}).items()}}
    env_b = {"device": b.get("device"), "device_name": b.get("device_name"), "dtype": b.get("dtype"),
             "threads": b.get("threads", MISSING), **{f"env {k}": v for k, v in (b.get("env") or {}).items()}}
    out += _pairs("environment", env_a, env_b)
    out += _pairs("versions", a.get("versions"), b.get("versions"))
    out += _pairs("dataset", _data(a), _data(b))
    out += _pairs("initial weights", _weights(a), _weights(b))
    seeds_a, seeds_b = a.get("seeds"), b.get("seeds")
    out += _pairs("seeds", seeds_a, seeds_b)
    seed_keys = set(seeds_a or {}) | set(seeds_b or {})
    out += _pairs("config", a.get("config"), b.get("config"), skip=NOT_CONFIG | seed_keys)
    return sorted(out, key=lambda c: SECTIONS.index(c.section))


def load_side(path: str) -> list[tuple[str, dict]]:
    """[(label, manifest)]: one for an artifact dir (label ""), one per finished step for a recipe run dir."""
    root = Path(path)
    if not root.is_dir():
        raise UserError(f"compare: {path} is not a directory; expected an artifact (with {MANIFEST}) or a run dir")
    manifest = read_manifest(root)
    if manifest is not None:
        return [("", manifest)]
    summary_file = root / "summary.json"
    if summary_file.is_file():
        try:
            steps = json.loads(summary_file.read_text()).get("steps", [])
        except (OSError, json.JSONDecodeError, AttributeError) as exc:
            raise UserError(f"compare: {summary_file} is unreadable ({exc})") from None
        out: list[tuple[str, dict]] = []
        for step in steps:
            found = read_manifest(step["output"]) if step.get("ok") and step.get("output") else None
            if found is not None:
                out.append((Path(step["output"]).name, found))
        if out:
            return out
    raise UserError(f"compare: {path} holds no {MANIFEST} (not an artifact) and no finished steps in summary.json")


def compare(a: str, b: str) -> list[Check]:
    side_a, side_b = load_side(a), load_side(b)
    if len(side_a) != len(side_b):
        raise UserError(f"compare: {a} has {len(side_a)} step(s) and {b} has {len(side_b)}; compare artifacts "
                        "one by one instead")
    out = []
    for (label_a, man_a), (label_b, man_b) in zip(side_a, side_b):
        for check in checks(man_a, man_b):
            if label_a or label_b:
                check.item = f"{label_a}: {check.item}" if label_a == label_b else f"{label_a}|{label_b}: {check.item}"
            out.append(check)
    return out


def print_report(a: str, b: str, found: list[Check], show_all: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"compare  A={a}  B={b}")
    for col in ("section", "checks", "result"):
        table.add_column(col)
    for section in SECTIONS:
        rows = [c for c in found if c.section == section]
        bad = [c for c in rows if not c.ok]
        result = "[red]DIFFER: " + ", ".join(c.item for c in bad) + "[/]" if bad else ("[green]pass[/]" if rows
                                                                                      else "(not recorded)")
        table.add_row(section, str(len(rows)), result)
    console = Console()
    console.print(table)
    detail = [c for c in found if show_all or not c.ok]
    if detail:
        diff = Table(title="all checks" if show_all else "what differs")
        for col in ("section", "item", "A", "B", ""):
            diff.add_column(col, overflow="fold")
        for c in detail:
            diff.add_row(c.section, c.item, _show(c.a), _show(c.b), "ok" if c.ok else "[red]DIFF[/]")
        console.print(diff)


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


def compare_cli(a: str, b: str, extra_args: Sequence[str]) -> int:
    """`./launch.sh compare A B [--json] [--all]`: 0 all pass, 1 something differs, 2 bad input."""
    from swiftbox.args import OneLineParser

    parser = OneLineParser(prog="swiftbox compare")
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of tables")
    parser.add_argument("--all", action="store_true", help="list every check, not only the differing ones")
    args = parser.parse_args([x for x in extra_args if x != "--"])
    found = compare(a, b)
    differ = [c for c in found if not c.ok]
    if args.json:
        print(json.dumps({"a": a, "b": b, "ok": not differ, "checks": len(found),
                          "differ": [asdict(c) for c in differ]}, default=str))
    else:
        print_report(a, b, found, args.all)
    return 1 if differ else 0

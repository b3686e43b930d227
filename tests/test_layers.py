"""The layout's rules, checked on the source: no import cycles between swiftbox modules at import time,
nothing below the CLI imports the CLI, and doctor reaches the device layer only through its package API."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "swiftbox"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return {name for name in out if name.split(".")[0] == "swiftbox"}


def _graph(top_level_only: bool = True) -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    return {mod: {m for m in _imports(path, top_level_only) if m in files and m != mod}
            for mod, path in files.items()}


def test_no_import_cycles_at_import_time():
    graph = _graph()
    # a module's package __init__ runs first anyway; edges to one's own parents are not cycles of ours
    for mod, deps in graph.items():
        graph[mod] = {d for d in deps if not mod.startswith(d + ".")}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep] if dep in stack else [node, dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert cycles == []


def test_nothing_below_the_cli_imports_it():
    importers = [mod for mod, deps in _graph(top_level_only=False).items() if "swiftbox.cli" in deps]
    assert importers == [] or set(importers) <= {"swiftbox.__main__"}


def test_doctor_uses_the_device_package_api_only():
    deps = _imports(PKG / "device" / "doctor.py", top_level_only=False)
    assert not {d for d in deps if d.startswith(("swiftbox.device.npu", "swiftbox.device.cuda", "swiftbox.device.cpu"))}

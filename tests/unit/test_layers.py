"""The layout's rules, checked on the source (swiftbox/, and menus/ and bench/ above it) - EVERY import, the ones
inside functions and under TYPE_CHECKING included (an ast walk of the whole module): no import cycles, no import
that points up the layers, nothing below the CLI imports the CLI, and doctor reaches the device layer only through
its package API. The cycle and upward-import tests print what they find (pytest -s). docs/architecture.md draws
the same layers."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "swiftbox"
PACKAGES = ("swiftbox", "menus", "bench")     # the menus and the benchmarks sit above everything swiftbox holds

# bottom first; a module may import its own layer and the ones below. The longest matching prefix decides
# (contract.py, what every pipeline implements and training uses, sits far below the pipelines).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("errors", "versions", "pins", "args", "tables", "logs", "compat", "artifacts", "disk", "report",
              "quant_methods", "procs", "modeling.adapter_file")),
    ("device", ("device", "llamacpp")),
    ("contract", ("steps", "reward_spec", "contract", "benchmarks.catalog")),
    ("data", ("data",)),                                    # datasets: read, render, tokenize
    # what models exist: the presets, and the committed toy with what builds and measures it (scoring)
    ("catalog", ("catalog",)),
    ("hub", ("hub",)),                                      # resolve and fetch a model reference, by the catalog
    ("models", ("modeling",)),                              # load models, adapter chains, score (reads hub)
    ("tools", ("parity", "diagnose", "training", "benchmarks", "migrate")),
    ("serving", ("serving",)),
    ("verify", ("verify",)),
    ("pipelines", ("pipelines",)),
    ("front", ("recipe", "runner", "api", "")),     # "": swiftbox/__init__.py
    ("menus", ("menus",)),      # the interactive menus: build recipes, hand them to the runner
    ("cli", ("cli", "__main__")),   # the command line (no command: the menus)
    ("bench", ("bench",)),      # benchmarks: drive any layer below (training internals, the CLI) to measure it
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return {name for name in out if name.split(".")[0] in PACKAGES}


def _graph(top_level_only: bool = False) -> dict[str, set[str]]:
    """module -> the swiftbox modules it imports (a package's own parents left out: its __init__ runs first
    anyway, so an edge to it is no cycle of ours)."""
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return {mod: {m for m in _imports(path, top_level_only) if m in files and m != mod and not mod.startswith(m + ".")}
            for mod, path in files.items()}


def layer(mod: str) -> int:
    rel = mod.removeprefix("swiftbox").removeprefix(".") if mod.split(".")[0] == "swiftbox" else mod
    found = [(len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes
             if rel == p or (p and rel.startswith(p + "."))]
    assert found, f"{mod} is in no layer; add it to LAYERS (and to docs/architecture.md)"
    return max(found)[1]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules (Tarjan), as module names."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from swiftbox.cli import main\n    import swiftbox.runner\n")
    assert _imports(source) == {"swiftbox.cli", "swiftbox.cli.main", "swiftbox.runner"}
    assert _imports(source, top_level_only=True) == set()


def test_the_cycle_finder_finds_a_cycle_through_three_modules():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_lazy_imports_included():
    found = cycles(_graph())
    print(f"import cycles (swiftbox, menus, bench): {len(found)}", *(" -> ".join(c) for c in found), sep="\n  ")
    assert found == []


def test_menus_and_bench_are_read():
    graph = _graph()
    assert "menus.main" in graph and "bench.sft" in graph and layer("menus.align") > layer("swiftbox.runner")
    assert "swiftbox.runner" in graph["menus.review"] or any(d.startswith("swiftbox") for d in graph["menus.review"])


def test_every_module_has_a_layer():
    for mod in _graph():
        layer(mod)


def test_no_import_points_up_the_layers():
    upward = sorted(f"{mod} ({LAYERS[layer(mod)][0]}) -> {dep} ({LAYERS[layer(dep)][0]})"
                    for mod, deps in _graph().items() for dep in deps if layer(dep) > layer(mod))
    print(f"upward imports: {len(upward)}", *upward, sep="\n  ")
    assert upward == []


def test_nothing_below_the_cli_imports_it():
    importers = [mod for mod, deps in _graph().items() if "swiftbox.cli" in deps and not mod.startswith("bench.")]
    assert importers == [] or set(importers) <= {"swiftbox.__main__"}


def test_doctor_uses_the_device_package_api_only():
    deps = _imports(PKG / "device" / "doctor.py")
    assert not {d for d in deps if d.startswith(("swiftbox.device.npu", "swiftbox.device.cuda", "swiftbox.device.cpu"))}

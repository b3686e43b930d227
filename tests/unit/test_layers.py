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
              "quant_methods", "procs", "lazy", "modeling.adapter_file")),
    # llama.cpp's tools: low, since doctor (device) and verify read them; the rest of export/ sits above the tools
    ("device", ("device", "export.llamacpp")),
    ("contract", ("steps", "reward_spec", "contract", "benchmarks.catalog", "template_switches")),
    ("data", ("data",)),                                    # datasets: read, render, tokenize
    # what models exist: the presets, and the committed toy with what builds and measures it (scoring)
    ("catalog", ("catalog",)),
    ("hub", ("hub",)),                                      # resolve and fetch a model reference, by the catalog
    ("models", ("modeling",)),                              # load models, adapter chains, score (reads hub)
    ("tools", ("parity", "diagnose", "training", "benchmarks", "migrate")),
    ("export", ("export",)),    # quantize's library: writers, calibration, quality gate (loads models, parity)
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


def rooms() -> list[str]:
    """The house's rooms: swiftbox's top-level modules and packages (its __init__ and __main__ included), menus/ and
    bench/ - what docs/architecture.md's before/after figures count."""
    return sorted([p.stem for p in PKG.glob("*.py")] + [p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()]
                  + ["menus", "bench"])


def test_the_house_figures():
    """The figures docs/architecture.md quotes (pytest -s prints them): rooms, arrows running back up, circles."""
    graph = _graph()
    upward = [dep for mod, deps in graph.items() for dep in deps if layer(dep) > layer(mod)]
    found = rooms()
    print(f"house: {len(found)} rooms, {len(upward)} arrows back up, {len(cycles(graph))} circles")
    assert {"catalog", "export", "contract", "menus", "bench"} <= set(found) and "llamacpp" not in found


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


# bench/ and menus/ sit on top and reach swiftbox through its public surfaces only: a package's `__all__` (what its
# __init__.py exports, lazily where a submodule is heavy) or a public name of one of these top-level modules. An
# import of anything deeper (swiftbox.training.model, swiftbox.compat, ...) is an internal and fails, named.
PUBLIC_MODULES = ("cli", "procs", "args", "steps", "errors", "recipe", "runner", "api", "artifacts", "report",
                  "quant_methods", "reward_spec")
TOP = ("bench", "menus")


def _is_package(mod: str) -> bool:
    return (ROOT / Path(*mod.split(".")) / "__init__.py").is_file()


def is_surface(mod: str) -> bool:
    return mod.split(".")[0] == "swiftbox" and (_is_package(mod) or mod.removeprefix("swiftbox.") in PUBLIC_MODULES)


def _exported(mod: str) -> list[str] | None:
    import importlib

    return getattr(importlib.import_module(mod), "__all__", None)


def _may_import(mod: str, name: str) -> bool:
    if is_surface(f"{mod}.{name}"):            # `from swiftbox import data`: a surface itself
        return True
    exported = _exported(mod)
    if _is_package(mod):
        return exported is not None and name in exported
    return not name.startswith("_") and (exported is None or name in exported)


def private_imports(path: Path) -> list[str]:
    """Each import of `path` that reaches past a public surface, as `file:line: the import (why)`."""
    out = []
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [f"{rel}:{node.lineno}: import {a.name} (not a public surface)" for a in node.names
                    if a.name.split(".")[0] == "swiftbox" and a.name != "swiftbox" and not is_surface(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "swiftbox":
            if node.module != "swiftbox" and not is_surface(node.module):
                names = ", ".join(a.name for a in node.names)
                out.append(f"{rel}:{node.lineno}: from {node.module} import {names} ({node.module} is internal: "
                           f"import from its package, listed in that package's __all__)")
                continue
            out += [f"{rel}:{node.lineno}: from {node.module} import {a.name} (not in {node.module}'s public surface: "
                    f"__all__ or a public name)" for a in node.names if not _may_import(node.module, a.name)]
    return out


def _defines(mod: str, name: str) -> bool:
    """Whether module `mod`'s source binds `name` at its top level (a def, class, assignment or import)."""
    base = ROOT / Path(*mod.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def test_the_surface_checker_names_an_internal_import(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from swiftbox.training.model import lora_config\n"
                      "    from swiftbox.training import lora_config, _EXPORTS\n"
                      "    from swiftbox.recipe import _short\n    import swiftbox.catalog.toy\n"
                      "    from swiftbox import data, procs\n    from swiftbox.device import current_platform\n")
    found = private_imports(source)
    assert [line.split(":")[1] for line in found] == ["2", "3", "4", "5"], found
    assert "swiftbox.training.model is internal" in found[0] and "import _EXPORTS" in found[1]


def test_bench_and_menus_import_public_surfaces_only():
    found = [line for top in TOP for path in sorted((ROOT / top).rglob("*.py")) for line in private_imports(path)]
    print(f"imports past a public surface (bench, menus): {len(found)}", *found, sep="\n  ")
    assert found == []


def test_every_exported_name_is_defined():
    """Each name a package's __all__ lists is bound there, a submodule, or (a lazy export) bound in the module its
    `_EXPORTS` table names - checked on the source, so no heavy submodule is imported to prove it."""
    import importlib

    missing = []
    for init in sorted(PKG.rglob("__init__.py")):
        mod = _module_name(init)
        module = importlib.import_module(mod)
        lazy = getattr(module, "_EXPORTS", {})
        for name in getattr(module, "__all__", ()):
            if name in lazy and ((init.parent / f"{name}.py").is_file() or (init.parent / name).is_dir()):
                missing.append(f"{mod}.{name} (a lazy export named like a submodule: once that is imported, "
                               "the package attribute is the module)")
                continue
            if name in vars(module) and name not in lazy:
                continue
            if (init.parent / f"{name}.py").is_file() or (init.parent / name / "__init__.py").is_file():
                continue
            target = lazy.get(name)       # a module, or (module, the name there)
            if target and _defines(*(target if isinstance(target, tuple) else (target, name))):
                continue
            if name not in lazy and mod == "swiftbox":      # swiftbox's own API resolves through swiftbox.api
                getattr(module, name)
                continue
            missing.append(f"{mod}.{name}")
    assert missing == []


def test_a_public_surface_loads_nothing_heavy_until_asked():
    """The packages' lazy exports keep their submodules cheap: importing one (or the surface itself) loads no torch;
    asking the surface for a heavy name does."""
    import os
    import subprocess
    import sys

    code = ("import sys\nimport swiftbox.training.model, swiftbox.modeling.adapter_file, swiftbox.catalog.presets\n"
            "import swiftbox.training, swiftbox.modeling, swiftbox.catalog, swiftbox.serving, swiftbox.pipelines\n"
            "print('torch' in sys.modules)\nfrom swiftbox.training import lora_linear\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert done.stdout.split() == ["False", "True"], done.stderr[-2000:]

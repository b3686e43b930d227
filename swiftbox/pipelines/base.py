"""The step contract's old address: it lives in swiftbox/contract.py (below training/ and pipelines/, which both use
it). Kept as a re-export while work in flight still imports it from here; new code imports swiftbox.contract."""
from __future__ import annotations

from swiftbox.contract import Declared, Pipeline, StepContext, StepResult, declare, no_check

__all__ = ["Declared", "Pipeline", "StepContext", "StepResult", "declare", "no_check"]

"""Stand-in pipelines for the runner tests: small fakes that record what they were given, and a one-line recipe."""
from __future__ import annotations

from swiftbox.contract import StepResult, declare
from swiftbox.steps import STEP_TYPES


def install_fake_pipelines(monkeypatch) -> list:
    """Replace pipelines with small fakes that record what they were given (the `fake_pipelines` fixture in
    tests/conftest.py); returns the list of calls."""
    calls = []

    def make(kind, produces, fail=False):
        def run(cfg, ctx):
            calls.append((kind, ctx.input, ctx.output.name))
            (ctx.work_dir / "weights.txt").write_text(kind)
            if fail:
                raise RuntimeError("boom in " + kind)
            return StepResult(metrics={"accuracy": 0.5}, info={"artifact": "adapter" if kind == "sft" else "report"})

        return declare(kind, STEP_TYPES[kind], produces_model=produces, run=run)

    table = {"sft": make("sft", True), "eval": make("eval", False), "merge": make("merge", True),
             "quantize": make("quantize", True, fail=True)}
    monkeypatch.setattr("swiftbox.runner.load_pipeline", lambda kind: table[kind])
    return calls


def recipe(*steps, name="r"):
    return {"name": name, "model": "toy", "steps": list(steps)}

"""Drive the menu's prompts in-process: prompt_toolkit pipe input + DummyOutput, one key chunk per prompt.

Each prompt the menu opens takes the next chunk of keys; feeding them one prompt at a time keeps a
prompt from swallowing keys meant for the next one. Fails loudly when a test sends too few chunks.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import questionary
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from menus import widgets
from menus.device_info import DeviceFacts, static_probe
from menus.session import MenuSession

ENTER = "\r"
DOWN = "\x1b[B"
UP = "\x1b[A"
ESC = "\x1b"
CTRL_C = "\x03"
BACKSPACE = "\x7f"


class OutOfKeys(AssertionError):
    pass


@contextmanager
def keys(monkeypatch, chunks: list[str]):
    """Feed `chunks` to the prompts in order; yields the list of prompt messages seen."""
    pending = list(chunks)
    seen: list[str] = []
    real_ask = widgets.ask

    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        def ask(question):
            if not pending:
                raise OutOfKeys(f"a prompt opened with no keys left (prompts so far: {seen})")
            pipe.send_text(pending.pop(0))
            return real_ask(question)

        def recording(make):
            def wrapper(message, *args, **kwargs):
                seen.append(str(message).strip())
                return make(message, *args, **kwargs)
            return wrapper

        monkeypatch.setattr(widgets, "ask", ask)
        for name in ("select", "text", "password", "autocomplete", "path", "confirm"):
            monkeypatch.setattr(questionary, name, recording(getattr(questionary, name)))
        yield seen
    assert not pending, f"unused key chunks {pending!r} (prompts seen: {seen})"


FACTS = DeviceFacts(name="cpu", count=1, memory_gib=16.0, free_gib=8.0, dtype="float32",
                    refusals={"qlora-bnb": "bitsandbytes is not installed; use lora",
                              "vllm": "vLLM needs an accelerator; use engine builtin",
                              "gptq": "gptqmodel is not installed; use pip install gptqmodel"})


class FakeRunner:
    """Records the recipes it is given and answers like the runner, writing nothing but a manifest."""

    def __init__(self, runs_dir: Path, artifact: str = "adapter"):
        self.runs_dir = Path(runs_dir)
        self.recipes: list[dict] = []
        self.artifact = artifact

    def __call__(self, recipe: dict, runs_root):
        import json

        self.recipes.append(recipe)
        kind, settings = next(iter(recipe["steps"][-1].items()))
        out = Path(settings.get("output") or Path(runs_root or "runs") / recipe["name"] / kind)
        out.mkdir(parents=True, exist_ok=True)
        artifact = self.artifact if kind in ("sft", "dpo", "kto", "orpo", "simpo") else (
            "model" if kind in ("merge", "quantize", "download") else "reward-model" if kind == "rm" else "report")
        (out / "swiftbox.json").write_text(json.dumps({"kind": kind, "artifact": artifact, "base_model": "toy",
                                                       "input": recipe.get("model")}))
        return {"recipe": recipe["name"], "device": "cpu",
                "steps": [{"step": kind, "ok": True, "output": str(out), "metrics": {}}]}


def make_session(tmp_path: Path, facts: DeviceFacts = FACTS, runner=None) -> MenuSession:
    runs = tmp_path / "runs"
    echoed: list[str] = []
    session = MenuSession(probe=static_probe(facts), runs_dir=runs, recipes_dir=tmp_path / "recipes",
                          run=runner or FakeRunner(runs), show_summary=lambda summary: None, echo=echoed.append)
    session.echoed = echoed
    return session

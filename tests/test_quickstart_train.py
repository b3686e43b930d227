"""The quickstart's training part (eval -> sft -> eval -> dpo -> eval, the settings of
recipes/quickstart.yaml) on the toy model, held to the numbers the issue asks for."""
from __future__ import annotations

import pytest
import yaml

from swiftbox.runner import run_recipe
from tests.conftest import ROOT


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="measured: with LoRA rank 8 the toy model learns the answer format but not "
                   "parity within the quickstart's CPU budget (held-out accuracy ~0.5); see docs/training.md")
def test_quickstart_training_chain_hits_the_numbers(tmp_path):
    recipe = yaml.safe_load((ROOT / "recipes" / "quickstart.yaml").read_text())
    steps = []
    for step in recipe["steps"]:
        kind = next(iter(step))
        if kind == "merge":
            break
        steps.append(step)
    assert [next(iter(s)) for s in steps] == ["eval", "sft", "eval", "dpo", "eval"]
    summary = run_recipe({"name": "qs", "model": recipe["model"], "steps": steps}, runs_root=tmp_path)
    base, sft, after_sft, dpo, after_dpo = (s["metrics"] for s in summary["steps"])
    assert abs(base["choice_accuracy"] - base["chance"]) <= 0.15       # untrained: near chance
    assert base["accuracy"] <= 0.6
    assert after_sft["accuracy"] >= 0.9                                   # held-out questions
    assert dpo["reward_margin_last"] > dpo["reward_margin_first"]
    assert after_dpo["accuracy"] >= 0.9

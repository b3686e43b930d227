"""The menu's GKD flow (Align screen): student, teacher, conversations, method, rank, lmbda, epochs - the recipe it
builds, and the teacher question never taking the carried student."""
from __future__ import annotations

import pytest

from menus import align
from menus.flows import FLOWS, run_flow
from menus.widgets import BACK
from tests.conftest import ROOT
from tests.fakes.menu_keys import BACKSPACE, ENTER, keys, make_session


@pytest.fixture(autouse=True)
def _setup(monkeypatch):
    from swiftbox.catalog import presets as registry

    monkeypatch.chdir(ROOT)                      # bundled datasets are listed relative to the working directory
    monkeypatch.setattr(registry, "PRESETS", ())  # model lists: toy + Other


def test_gkd_flow_builds_its_recipe(tmp_path, monkeypatch):
    session = make_session(tmp_path)
    # student, teacher, data, method, rank, lmbda, epochs, output, review
    chunks = [ENTER, ENTER, ENTER, ENTER, ENTER, BACKSPACE * 8 + "1" + ENTER, ENTER, ENTER, ENTER]
    with keys(monkeypatch, chunks) as seen:
        outcome = run_flow(session, FLOWS["gkd"])
    assert outcome is not BACK and session.run.recipes == [outcome.recipe]
    assert outcome.recipe["steps"] == [{"gkd": {"dataset": "recipes/data/parity_sft.jsonl", "method": "lora",
                                                "lora": {"rank": 8, "alpha": 16}, "teacher": "toy", "lmbda": 1.0,
                                                "epochs": 1.0}}]
    assert any("Teacher model" in message for message in seen)
    assert "gkd" in [kind for kind, _ in align.ALIGN]


def test_the_teacher_question_ignores_the_carried_student(tmp_path, monkeypatch):
    from menus.flows import _teacher

    asked = {}

    def fake_model(session, message, task=None, **kwargs):
        def ask(state):
            asked.update(state)
            return "teacher-dir"
        return ask

    monkeypatch.setattr("menus.flows.q.model", fake_model)
    assert _teacher(make_session(tmp_path))({"carry": "runs/x/sft", "model": "runs/x/sft"}) == "teacher-dir"
    assert "carry" not in asked and asked.get("model") is None

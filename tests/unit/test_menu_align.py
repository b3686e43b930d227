"""The menu's Align screen: one entry per alignment method, each flow building its recipe with its own few
questions, entries the device cannot run greyed with the reason, and the screen offered after SFT."""
from __future__ import annotations

import pytest
import questionary

from menus import align, main
from menus.flows import FLOWS, Flow, run_flow
from menus.widgets import BACK
from tests.conftest import ROOT
from tests.fakes.menu_keys import BACKSPACE, CTRL_C, DOWN, ENTER, FACTS, UP, keys, make_session

PAIRS = "recipes/data/parity_dpo.jsonl"
LORA = {"method": "lora", "lora": {"rank": 8, "alpha": 16}, "epochs": 1.0}


@pytest.fixture(autouse=True)
def _setup(monkeypatch):
    from swiftbox.catalog import presets as registry

    monkeypatch.chdir(ROOT)                      # bundled datasets are listed relative to the working directory
    monkeypatch.setattr(registry, "PRESETS", ())  # model lists: toy + Other


CASES = {
    # kind: (key chunk per prompt: model, data, method, rank, the method's own, epochs, output, review; settings)
    "kto": ([ENTER, ENTER, ENTER, ENTER, BACKSPACE * 8 + "0.2" + ENTER, ENTER, ENTER, ENTER],
            {"dataset": "recipes/data/parity_kto.jsonl", "beta": 0.2, **LORA}),
    "orpo": ([ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER], {"dataset": PAIRS, "beta": 0.1, **LORA}),
    "simpo": ([ENTER, ENTER, ENTER, ENTER, ENTER, BACKSPACE * 8 + "1" + ENTER, ENTER, ENTER, ENTER],
              {"dataset": PAIRS, "beta": 2.0, "gamma": 1.0, **LORA}),
    "rm": ([ENTER, ENTER, ENTER, ENTER, DOWN + DOWN + ENTER, ENTER, ENTER, ENTER],
           {"dataset": PAIRS, "eval_dataset": "recipes/data/parity_heldout_dpo.jsonl", **LORA}),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_alignment_flow_builds_its_recipe(kind, tmp_path, monkeypatch):
    chunks, settings = CASES[kind]
    session = make_session(tmp_path)
    with keys(monkeypatch, chunks):
        outcome = run_flow(session, FLOWS[kind])
    assert outcome is not BACK and session.run.recipes == [outcome.recipe]
    assert outcome.recipe["steps"] == [{kind: settings}] and outcome.recipe["model"] == "toy"
    assert outcome.recipe["name"].startswith(f"{kind}-toy-")


def test_the_align_screen_lists_every_method_and_opens_the_chosen_flow(tmp_path, monkeypatch):
    seen: list = []
    inner = questionary.select

    def recording(message, choices=None, **kwargs):
        seen.append((str(message), [c.value for c in choices]))
        return inner(message, choices=choices, **kwargs)

    session = make_session(tmp_path)
    to_align = DOWN * [value for value, _ in main.ITEMS].index("align")
    chunks = [to_align + ENTER,                                  # main: Align
              DOWN + ENTER,                                      # align: KTO
              ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER,  # kto questions, Run
              UP + ENTER,                                        # next after kto: Back to the main menu
              CTRL_C]
    with keys(monkeypatch, chunks):
        monkeypatch.setattr(questionary, "select", recording)
        main.run_menu(session)
    screen = next(values for message, values in seen if message.startswith("Align"))
    assert screen == [kind for kind, _ in align.ALIGN] + [BACK]
    assert set(screen[:-1]) <= set(FLOWS) and {"dpo", "kto", "orpo", "simpo", "rm"} <= set(screen)
    (step, settings), = session.run.recipes[0]["steps"][0].items()
    assert step == "kto" and settings["dataset"] == "recipes/data/parity_kto.jsonl"
    assert any(message.startswith("kto finished. Next?") for message, _ in seen)


def test_an_entry_the_device_cannot_run_is_greyed_with_the_reason(tmp_path, monkeypatch):
    # a method that needs a capability this machine lacks (FACTS refuses gptq) is shown, disabled, with why
    monkeypatch.setitem(FLOWS, "rm", Flow("rm", "rm", FLOWS["rm"].questions, FLOWS["rm"].step, needs=("gptq",)))
    session = make_session(tmp_path, FACTS)
    entries = {c.value: c.disabled for c in align.choices(session)}
    assert "gptqmodel is not installed" in entries["rm"]
    assert not entries["kto"] and not entries["dpo"]


def test_a_reward_model_is_not_offered_as_a_policy(tmp_path):
    from menus import artifacts

    rm = tmp_path / "runs" / "x" / "rm"
    rm.mkdir(parents=True)
    (rm / "swiftbox.json").write_text('{"kind": "rm", "artifact": "reward-model", "base_model": "toy"}')
    found = artifacts.describe(str(rm))
    assert found is not None and found.artifact == "reward-model"
    for task in ("sft", "kto", "merge", "quantize"):
        assert "reward model" in artifacts.refusal(found, task)
    session = make_session(tmp_path)
    assert all(c.disabled for c in align.choices(session, carry=str(rm)) if c.value is not BACK)

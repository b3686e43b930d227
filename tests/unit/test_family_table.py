"""The family table of docs/models.md (issue 34) is computed, complete and current: every template fixture and
every preset has its row, every cell is one of the allowed verdicts, nothing is inexact without being refused, the
cells follow the checks and the registry (a broken expectation or a changed packing policy changes them), and the
committed section is exactly what `python -m tests.support.family_table` prints."""
from __future__ import annotations

import dataclasses

import pytest

from swiftbox.catalog import presets as registry
from tests.support import family_table as ft


@pytest.fixture(scope="module")
def tok(toy_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(toy_dir)


@pytest.fixture(scope="module")
def rows(tok):
    return ft.compute(tok)


def test_every_fixture_and_every_preset_has_a_row(rows):
    assert sorted(r.fixture for r in rows) == sorted(p.stem for p in ft.TEMPLATES.glob("*.jinja"))
    names = [n for r in rows for n in r.presets]
    assert sorted(names) == sorted(p.name for p in registry.PRESETS)      # each preset in exactly one row
    for r in rows:
        assert r.model_types and all(registry.find(n).model_type in r.model_types for n in r.presets), r.fixture


def test_cells_are_allowed_verdicts_and_nothing_is_inexact_unless_refused(rows):
    for r in rows:
        assert set(r.cells) == set(ft.COLUMNS[3:]), r.fixture
        for column, cell in r.cells.items():
            assert cell in ft.ALLOWED[column], (r.fixture, column, cell)
            assert cell != "no", (r.fixture, column)
        refused = any(registry.training_refusal(t) for t in r.model_types)
        assert (r.cells["SFT labels"] == "refused (exit 3)") == refused, r.fixture
        assert (r.cells["DPO split"] == "refused (exit 3)") == refused, r.fixture
        if refused:
            assert any(n.startswith("training refused: ") for n in r.notes), r.fixture
            assert "the template itself is exact (SFT labels and DPO split checked)" in r.notes, r.fixture


def test_cells_follow_the_registry_and_the_template(rows):
    by = {r.fixture: r for r in rows}
    for r in rows:
        if r.cells["SFT batching (default)"] == "n/a (training refused)":
            continue
        padded = [t for t in r.model_types if registry.packing_policy(t) != "exact"]
        assert (r.cells["SFT batching (default)"] == "padded, grouped by length") == bool(padded), r.fixture
        assert all(any(registry.PACKING_NOT_EXACT[t] in n for n in r.notes) for t in padded), r.fixture
        assert (r.cells["tools"] == "template's format") == (ft.FAMILIES[r.fixture].tool_call is not None)
        assert (r.cells["reasoning"] == "template's format") == (ft.FAMILIES[r.fixture].reasoning is not None)
    # custom-code families pad (their attention code ignores the packed rows' position_ids)
    for fixture in ("internlm-internlm2_5-7b-chat", "baichuan-inc-Baichuan2-7B-Chat"):
        assert by[fixture].cells["SFT batching (default)"] == "padded, grouped by length"
    assert by["google-gemma-2-2b-it"].cells["SFT labels"] == "yes, no system role (exit 2)"
    r1 = by["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"]       # generation opens <think>, training does not
    assert r1.cells["generation prompt"] == "yes, SFT context differs" and "'<think>\\n'" in r1.notes[0]


def test_the_table_is_computed_not_written_down(tok, monkeypatch):
    """A wrong expectation turns a cell to "no"; a changed packing policy changes the batching cell."""
    name = "HuggingFaceTB-SmolLM2-135M-Instruct"
    assert ft.row(tok, name).cells["SFT labels"] == "yes"
    monkeypatch.setitem(ft.FAMILIES, name, dataclasses.replace(ft.FAMILIES[name], eot="<|eot_id|>"))
    broken = ft.row(tok, name).cells
    assert broken["SFT labels"] == broken["DPO split"] == broken["reasoning"] == "no"
    monkeypatch.undo()
    monkeypatch.setitem(registry.PACKING_NOT_EXACT, "llama", "declared for the test")
    again = ft.row(tok, name)
    assert again.cells["SFT batching (default)"] == "padded, grouped by length"
    assert "padded (llama): declared for the test" in again.notes


def test_docs_hold_the_computed_table(rows):
    section = ft.doc_section(ft.DOC.read_text(encoding="utf-8"))
    assert section is not None, f"docs/models.md has no {ft.BEGIN} / {ft.END} section"
    assert section == ft.markdown(rows), ("docs/models.md's family table is stale: "
                                          "python -m tests.support.family_table --write")


def test_bad_arguments_are_one_line_and_exit_2(capsys):
    assert ft.main(["--bogus"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "usage" in out.err

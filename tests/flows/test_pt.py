"""Continued pre-training (pt) on the toy: raw text read from .txt / jsonl `text` / directories, packed into
blocks with every token a label (documents joined with eos), one document per row where the packing policy says
packing is not exact; held-out perplexity before and after goes down; bad input is one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from swiftbox.errors import UserError
from swiftbox.runner import run_recipe

SHAKESPEARE = Path(__file__).resolve().parents[2] / "swiftbox" / "assets" / "shakespeare.txt"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def paragraphs(n: int, start: int = 0) -> list[str]:
    text = SHAKESPEARE.read_text(encoding="utf-8")
    return [p.strip() for p in text.split("\n\n") if p.strip()][start:start + n]


def pt(tmp_path, dataset, **settings):
    step = {"dataset": dataset, "max_steps": 4, "batch_size": 4, "block_size": 64, "save_steps": 100,
            "logging_steps": 1, "learning_rate": 1e-3, "heldout": 8, **settings}
    summary = run_recipe({"name": "t", "model": "toy", "steps": [{"pt": step}]}, runs_root=tmp_path,
                         log=lambda m: None)
    return summary["steps"][0]


def test_documents_from_txt_jsonl_and_directory(tmp_path):
    from swiftbox.data import texts

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("first para\nline two\n\n\nsecond para\n", encoding="utf-8")
    (tmp_path / "d" / "b.jsonl").write_text(json.dumps({"text": "a row"}) + "\n\n" + json.dumps({"text": "b"}) + "\n")
    (tmp_path / "d" / "skip.md").write_text("not read")
    assert list(texts.documents(str(tmp_path / "d"))) == ["first para\nline two", "second para", "a row", "b"]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"messages": []}) + "\n")
    with pytest.raises(UserError, match="no `text` string"):
        list(texts.documents(str(tmp_path / "bad.jsonl")))
    (tmp_path / "x.parquet").write_bytes(b"")
    with pytest.raises(UserError, match=r"\.txt or \.jsonl"):
        texts.text_files(str(tmp_path / "x.parquet"))
    with pytest.raises(UserError, match="file not found"):
        texts.text_files(str(tmp_path / "missing.txt"))


def test_pack_joins_documents_with_eos_and_labels_every_token(toy_dir):
    from transformers import AutoTokenizer

    from swiftbox.data import texts

    tok = AutoTokenizer.from_pretrained(toy_dir)
    docs = paragraphs(12)
    encode = texts.token_ids(tok)
    counts = texts.TextCounts()
    blocks = list(texts.pack(docs, encode, 32, counts))
    stream = [t for d in docs for t in tok(d, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]]
    assert [t for b in blocks for t in b["input_ids"]] == stream          # nothing lost, nothing added but eos
    assert all(len(b["input_ids"]) == 32 for b in blocks[:-1]) and 2 <= len(blocks[-1]["input_ids"]) <= 32
    assert all(b["labels"] == b["input_ids"] for b in blocks)               # no masks: every token trains
    assert stream.count(tok.eos_token_id) >= len(docs) and counts.documents == len(docs)
    assert counts.tokens == len(stream) and counts.blocks == len(blocks)

    rows = list(texts.one_per_row(docs, encode, 16, counts := texts.TextCounts()))
    assert len(rows) == len(docs) and all(len(r["input_ids"]) <= 16 for r in rows)
    assert counts.truncated == sum(len(encode(d)) > 16 for d in docs) > 0
    assert rows[0]["input_ids"] == encode(docs[0])[:16]


def test_schema_streaming_and_block_size():
    from pydantic import ValidationError

    from swiftbox.steps import DpoStep, PtStep, SftStep

    with pytest.raises(ValidationError, match="needs max_steps"):
        SftStep(dataset="a.jsonl", streaming=True)
    with pytest.raises(ValidationError, match="the dpo step reads its dataset into memory"):
        DpoStep(dataset="a.jsonl", streaming=True, max_steps=3)
    assert PtStep(dataset="a.txt", streaming=True, max_steps=3, block_size=256).max_length == 256
    with pytest.raises(ValidationError, match="set block_size, not max_length"):
        PtStep(dataset="a.txt", max_length=128)


@pytest.mark.slow     # ~35 s on the shared 2-core box
def test_pt_lowers_heldout_perplexity_of_the_same_corpus(tmp_path):
    """Shakespeare the toy never saw (the last 10% of its paragraphs): the first 16 paragraphs are held out and get
    likelier after a few steps on the rest."""
    from swiftbox.catalog.toy_corpus import shakespeare_paragraphs

    unseen = shakespeare_paragraphs()[1]
    data = tmp_path / "plays.txt"
    data.write_text("\n\n".join(unseen), encoding="utf-8")
    result = pt(tmp_path, str(data), max_steps=8, batch_size=8, heldout=16, learning_rate=1e-3)
    m = result["metrics"]
    assert m["rows"] == "packed blocks" and m["heldout_documents"] == 16 and m["train_documents"] == len(unseen) - 16
    assert m["perplexity_after"] < m["perplexity_before"], m
    manifest = json.loads((Path(result["output"]) / "swiftbox.json").read_text())
    assert manifest["kind"] == "pt" and manifest["artifact"] == "adapter"
    assert manifest["metrics"]["perplexity_before"] == m["perplexity_before"]
    assert (Path(result["output"]) / "adapter_model.safetensors").is_file()


@pytest.mark.slow     # real model: a few minutes on 2 cores
def test_pt_streaming_on_the_real_model_lowers_heldout_perplexity(real_model_dir, tmp_path, monkeypatch):
    """Issue 34: `pt` with `streaming` on SmolLM2-135M-Instruct (the converted copy): Shakespeare the toy never saw,
    read lazily from jsonl, packed; a separate held-out file gets likelier after a few LoRA steps."""
    from swiftbox.catalog.toy_corpus import shakespeare_paragraphs
    from tests.conftest import REAL_MODEL

    monkeypatch.setenv("SWIFTBOX_OFFLINE", "1")
    unseen = shakespeare_paragraphs()[1]
    train, held = tmp_path / "plays.jsonl", tmp_path / "held.jsonl"
    train.write_text("".join(json.dumps({"text": p}) + "\n" for p in unseen[12:]), encoding="utf-8")
    held.write_text("".join(json.dumps({"text": p}) + "\n" for p in unseen[:12]), encoding="utf-8")
    step = {"dataset": str(train), "eval_dataset": str(held), "streaming": True, "shuffle_buffer": 64,
            "max_steps": 6, "batch_size": 4, "block_size": 128, "learning_rate": 1e-3, "dtype": "float32",
            "save_steps": 100, "logging_steps": 1}
    summary = run_recipe({"name": "t", "model": REAL_MODEL, "steps": [{"pt": step}]}, runs_root=tmp_path,
                         log=lambda m: None)
    m = summary["steps"][0]["metrics"]
    assert m["rows"] == "packed blocks" and m["steps"] == 6 and m["heldout_documents"] == 12
    assert m["perplexity_after"] < m["perplexity_before"], m


def test_pt_streams_one_document_per_row_where_packing_is_not_exact(tmp_path, monkeypatch):
    """A model type whose packing is not exact (here the toy, declared so) trains on one document per row; the
    jsonl is read as a stream."""
    from swiftbox.catalog import presets as registry

    monkeypatch.setitem(registry.PACKING_NOT_EXACT, "qwen2", "declared for the test")
    data = tmp_path / "plays.jsonl"
    data.write_text("".join(json.dumps({"text": p}) + "\n" for p in paragraphs(60)), encoding="utf-8")
    m = pt(tmp_path, str(data), streaming=True, shuffle_buffer=16, max_steps=2, heldout=4)["metrics"]
    assert m["rows"] == "one document per row"
    assert m["train_rows"] == m["train_documents"] > 0 and m["truncated_documents"] > 0
    assert m["steps"] == 2 and m["perplexity_before"] > 0


def test_pt_bad_input_is_one_line_exit_2(tmp_path):
    from tests.conftest import run_cli

    (tmp_path / "rows.parquet").write_bytes(b"PAR1")
    out = run_cli("pt", "toy", "--dataset", str(tmp_path / "rows.parquet"), "--max-steps", "1",
                  "--output", str(tmp_path / "o"))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert ".txt or .jsonl" in out.stderr
    out = run_cli("dpo", "toy", "--dataset", "x.jsonl", "--streaming", "--max-steps", "1")
    assert out.returncode == 2 and "dpo step" in out.stderr and len(out.stderr.strip().splitlines()) == 1

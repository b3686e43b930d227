"""Progress while large data is read and prepared (issue 32, class 5): a million-row file printed nothing for
minutes before training began. Now each long loop over rows (reading a file, normalising its format, rendering and
tokenizing) prints a line every SWIFTBOX_PROGRESS_EVERY seconds (default 10), and nothing when it ends sooner.
The interval is set to 0 here (a line per row) so the test needs no clock."""
from __future__ import annotations

import json

import pytest

from swiftbox import data
from swiftbox.catalog.toy import toy_path

ROW = {"messages": [{"role": "user", "content": "Is 7 odd?"}, {"role": "assistant", "content": "yes"}]}
PAIR = {"prompt": "Is 7 odd?", "chosen": "yes", "rejected": "no"}


def write(path, rows, n):
    path.write_text("".join(json.dumps(rows) + "\n" for _ in range(n)))
    return str(path)


def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(toy_path(0))


@pytest.fixture
def every_row(monkeypatch):
    monkeypatch.setenv("SWIFTBOX_PROGRESS_EVERY", "0")


def test_reading_a_file_reports_progress(tmp_path, capsys, every_row):
    rows = data.load_sft(write(tmp_path / "big.jsonl", ROW, 50))
    assert len(rows) == 50
    err = capsys.readouterr().err.splitlines()
    reading = [line for line in err if line.startswith("reading ") and "big.jsonl" in line]
    assert reading and "of 50 rows" in reading[0] and reading[-1].endswith("done"), err


def test_preparing_rows_reports_progress(tmp_path, capsys, every_row):
    tok = tokenizer()
    train, counts = data.tokenize_sft(data.load_sft(write(tmp_path / "s.jsonl", ROW, 20)), tok, 256)
    assert len(train) == 20
    pairs, _ = data.dpo_strings(data.load_dpo(write(tmp_path / "p.jsonl", PAIR, 20)), tok, 256)
    assert len(pairs) == 20
    err = capsys.readouterr().err
    assert err.count("of 20 rows") >= 20 and "tokeniz" in err, err


def test_a_small_file_read_quickly_prints_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SWIFTBOX_PROGRESS_EVERY", raising=False)
    data.tokenize_sft(data.load_sft(write(tmp_path / "small.jsonl", ROW, 5)), tokenizer(), 256)
    assert capsys.readouterr().err == ""


def test_progress_lines_say_how_far_and_how_long():
    from swiftbox.data.progress import each

    ticks = iter(range(0, 1000, 4))                 # a clock that moves 4 s per look
    said: list[str] = []
    assert list(each(range(6), "reading x.jsonl", say=said.append, clock=lambda: next(ticks))) == list(range(6))
    assert said[0].startswith("reading x.jsonl: ") and "of 6 rows" in said[0] and "left)" in said[0]
    assert said[-1].endswith("done") and "6 of 6 rows (100%" in said[-1]

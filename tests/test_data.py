"""swiftbox.data: every accepted row format, file kinds, sampling, the bad-columns error, assistant-only
labels and the DPO truncation guard."""
from __future__ import annotations

import json

import pytest

from swiftbox import data
from swiftbox.errors import UserError

USER_Q = {"role": "user", "content": "Is 12 even?"}
ANSWER = {"role": "assistant", "content": "yes"}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("row,expected", [
    ({"messages": [USER_Q, ANSWER]}, [USER_Q, ANSWER]),
    ({"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Is 12 even?"},
                        {"from": "gpt", "value": "yes"}]},
     [{"role": "system", "content": "Be brief."}, USER_Q, ANSWER]),
    ({"system": "Be brief.",
      "conversations": [{"from": "human", "value": "Is 12 even?"}, {"from": "gpt", "value": "yes"}]},
     [{"role": "system", "content": "Be brief."}, USER_Q, ANSWER]),
    ({"instruction": "Is 12 even?", "input": "", "output": "yes"}, [USER_Q, ANSWER]),
    ({"instruction": "Answer yes or no.", "input": "Is 12 even?", "output": "yes", "system": "Be brief.",
      "history": [["Is 3 odd?", "yes"]]},
     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is 3 odd?"},
      {"role": "assistant", "content": "yes"}, {"role": "user", "content": "Answer yes or no.\nIs 12 even?"}, ANSWER]),
    ({"query": "Is 12 even?", "response": "yes"}, [USER_Q, ANSWER]),
])
def test_sft_formats_normalise_to_messages(tmp_path, row, expected):
    rows = data.load_sft(write_jsonl(tmp_path / "d.jsonl", [row]))
    assert rows == [{"messages": expected}]


PROMPT = [USER_Q]
CHOSEN = [{"role": "assistant", "content": "yes"}]
REJECTED = [{"role": "assistant", "content": "no"}]


@pytest.mark.parametrize("row", [
    {"prompt": "Is 12 even?", "chosen": "yes", "rejected": "no"},
    {"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED},
    {"messages": [USER_Q, ANSWER], "rejected_response": "no"},
    {"instruction": "Is 12 even?", "input": "", "chosen": "yes", "rejected": "no"},
    {"query": "Is 12 even?", "chosen": "yes", "rejected": "no"},
])
def test_dpo_formats_normalise_to_triples(tmp_path, row):
    rows = data.load_dpo(write_jsonl(tmp_path / "p.jsonl", [row]))
    assert rows == [{"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}]


def test_json_parquet_lists_and_sampling(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"query": f"q{i}", "response": f"a{i}"} for i in range(10)]
    (tmp_path / "d.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    jsonl = write_jsonl(tmp_path / "d.jsonl", rows)
    assert len(data.load_sft(str(tmp_path / "d.json"))) == 10
    assert data.load_sft(str(tmp_path / "d.parquet")) == data.load_sft(jsonl)
    mixed = data.load_sft([jsonl + "#3", str(tmp_path / "d.parquet") + "#25"], seed=1)
    assert len(mixed) == 28
    assert data.load_sft([jsonl + "#3"], seed=1) == data.load_sft([jsonl + "#3"], seed=1)   # deterministic
    assert len({r["messages"][0]["content"] for r in data.load_sft(jsonl + "#10")}) == 10  # a permutation


def test_unknown_columns_name_file_columns_and_formats(tmp_path):
    path = write_jsonl(tmp_path / "weird.jsonl", [{"question": "Is 12 even?", "answer": "yes"}])
    with pytest.raises(UserError) as err:
        data.load_sft(path)
    msg = str(err.value)
    assert "weird.jsonl" in msg and "'answer'" in msg and "'question'" in msg
    assert "messages" in msg and "alpaca" in msg and "ShareGPT" in msg and "\n" not in msg
    with pytest.raises(UserError, match="prompt/chosen/rejected"):
        data.load_dpo(path)


@pytest.mark.parametrize("text,needle", [
    ('{"messages": "hi"}\n', "row 1"), ('{"messages": [{"role": "robot", "content": "x"}]}\n', "unknown role"),
    ('not json\n', "line 1 is not valid JSON"), ('[1, 2]\n', "expected a JSON object"),
])
def test_malformed_rows_are_one_line_errors(tmp_path, text, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        data.load_sft(str(path))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_missing_file_and_bad_sample_count(tmp_path):
    with pytest.raises(UserError, match="file not found"):
        data.load_sft(str(tmp_path / "nope.jsonl"))
    with pytest.raises(UserError, match="PATH#N"):
        data.load_sft(str(tmp_path / "x.jsonl#many"))


def test_labels_cover_only_assistant_tokens(toy_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_dir)
    msgs = [{"role": "system", "content": "Be brief."}, USER_Q, {"role": "assistant", "content": "yes"},
            {"role": "user", "content": "Is 7 even?"}, {"role": "assistant", "content": "no"}]
    (row,), dropped = data.tokenize_sft([{"messages": msgs}], tok, 512)
    trained = tok.decode([t for t in row["labels"] if t != -100])
    assert dropped == 0 and trained == "yes<|im_end|>no<|im_end|>"
    # truncated before the first answer: nothing left to learn, the row is dropped
    rows, dropped = data.tokenize_sft([{"messages": msgs}], tok, 8)
    assert rows == [] and dropped == 1


def test_dpo_pairs_truncated_to_nothing_are_dropped(toy_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_dir)
    short = {"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}
    long = {"prompt": [{"role": "user", "content": "Is 12 even? " * 40}], "chosen": CHOSEN, "rejected": REJECTED}
    empty = {"prompt": PROMPT, "chosen": [{"role": "assistant", "content": ""}], "rejected": REJECTED}
    kept, dropped = data.drop_truncated_pairs([short, long, empty], tok, 64)
    assert kept == [short] and dropped == 2

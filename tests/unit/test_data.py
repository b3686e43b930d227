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
    path = write_jsonl(tmp_path / "weird.jsonl", [{"question_text": "Is 12 even?", "answer_text": "yes"}])
    with pytest.raises(UserError) as err:
        data.load_sft(path)
    msg = str(err.value)
    assert "weird.jsonl" in msg and "'answer_text'" in msg and "'question_text'" in msg
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
    (row,), counts = data.tokenize_sft([{"messages": msgs}], tok, 512)
    trained = tok.decode([t for t in row["labels"] if t != -100])
    assert counts.dropped == counts.truncated == 0 and trained == "yes<|im_end|>no<|im_end|>"
    # too long: the prompt loses tokens from the left, the system prompt and the last reply are kept
    long = [msgs[0], {"role": "user", "content": "Is 12 even? " * 30}] + msgs[2:]
    full = data.encode(tok, long)
    (row,), counts = data.tokenize_sft([{"messages": long}], tok, 24)
    assert counts.truncated == 1 and counts.dropped == 0 and len(row["input_ids"]) == 24 < len(full.input_ids)
    assert tok.decode(row["input_ids"]).startswith(tok.decode(full.input_ids[:full.head]))
    assert "Be brief." in tok.decode(row["input_ids"])
    assert tok.decode([t for t in row["labels"] if t != -100]).endswith("no<|im_end|>")
    # a reply that alone exceeds max_length is the only reason to drop a row
    numbers = " ".join(map(str, range(99)))
    rows, counts = data.tokenize_sft([{"messages": [USER_Q, {"role": "assistant", "content": numbers}]}],
                                     tok, 16)
    assert rows == [] and counts.dropped == 1


def test_dpo_pairs_long_prompts_are_cut_from_the_left_and_empty_replies_dropped(toy_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_dir)
    short = {"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}
    long = {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is 12 even? " * 40}],
            "chosen": CHOSEN, "rejected": REJECTED}
    empty = {"prompt": PROMPT, "chosen": [{"role": "assistant", "content": ""}], "rejected": REJECTED}
    huge = {"prompt": PROMPT, "chosen": [{"role": "assistant", "content": " ".join(map(str, range(200)))}],
            "rejected": REJECTED}
    pairs, counts = data.dpo_strings([short, long, empty, huge], tok, 64)
    assert (counts.truncated, counts.dropped, len(pairs)) == (1, 2, 2)
    assert pairs[0] == {"prompt": tok.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True),
                        "chosen": "yes<|im_end|>", "rejected": "no<|im_end|>"}
    cut = pairs[1]["prompt"]
    assert cut.startswith("<|im_start|>system\nBe brief.") and cut.endswith("<|im_start|>assistant\n")
    assert len(tok(cut + "yes<|im_end|>", add_special_tokens=False)["input_ids"]) <= 64


def test_file_quirks_bom_line_separators_hash_names_surrogates_and_huge_rows(tmp_path):
    row = {"messages": [{"role": "user", "content": "a\u2028b\u2029c"}, ANSWER]}
    bom = tmp_path / "bom#1.jsonl"           # a '#' in a real file name, a BOM, U+2028 inside a string
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(row, ensure_ascii=False).encode() + b"\n")
    (got,) = data.load_sft(str(bom))
    assert got["messages"][0]["content"] == "a\u2028b\u2029c"
    assert len(data.load_sft(str(bom) + "#3")) == 3              # sampling still works on such a name
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "x\\ud800"}, {"role": "assistant", "content": "y"}]}\n')
    with pytest.raises(UserError, match=r"bad.jsonl: line 1 holds invalid Unicode") as err:
        data.load_sft(str(bad))
    assert "\n" not in str(err.value)
    big = write_jsonl(tmp_path / "big.jsonl", [{"query": "q", "response": "a"}, {"query": "q" * 500, "response": "a"}])
    with pytest.raises(UserError, match=r"big.jsonl: row 2 has \d+ characters, over max_row_chars 100"):
        data.load_sft(big, max_row_chars=100)
    assert len(data.load_sft(big)) == 2


TOOLS = [{"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {}}}]
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
NORMAL_CALL = [{"type": "function", "function": CALL}]


@pytest.mark.parametrize("row", [
    {"conversations": [{"from": "human", "value": "Weather?"}, {"from": "function_call", "value": json.dumps(CALL)},
                       {"from": "observation", "value": "21"}, {"from": "gpt", "value": "21 degrees."}],
     "tools": json.dumps(TOOLS)},                                                    # LLaMA-Factory sharegpt
    {"messages": [{"role": "user", "content": "Weather?"}, {"role": "tool_call", "content": json.dumps(CALL)},
                  {"role": "tool_response", "content": "21"}, {"role": "assistant", "content": "21 degrees."}],
     "tools": json.dumps(TOOLS)},                                                    # ms-swift agent format
    {"messages": [{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                                     "arguments": json.dumps({"city": "Paris"})}}]},
                  {"role": "tool", "content": "21", "tool_call_id": "c1"},
                  {"role": "assistant", "content": "21 degrees."}],
     "tools": [{"type": "function", "function": TOOLS[0]}]},                         # OpenAI
])
def test_tool_calling_formats_normalise_alike(tmp_path, row):
    (got,) = data.load_sft(write_jsonl(tmp_path / "t.jsonl", [row]))
    assert got["tools"] == [{"type": "function", "function": TOOLS[0]}]
    call = got["messages"][1]
    assert call["role"] == "assistant" and call["content"] is None
    assert [{k: v for k, v in c.items() if k != "id"} for c in call["tool_calls"]] == NORMAL_CALL
    assert [m["role"] for m in got["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_peer_formats_ranking_rows_aliases_and_per_turn_loss(tmp_path, toy_dir):
    from transformers import AutoTokenizer

    ranking = {"conversations": [{"from": "human", "value": "Is 12 even?"}], "chosen": {"from": "gpt", "value": "yes"},
               "rejected": {"from": "gpt", "value": "no"}}
    swift = {"query": "Is 12 even?", "response": "yes", "rejected_response": "no"}
    for row in (ranking, swift):
        assert data.load_dpo(write_jsonl(tmp_path / "r.jsonl", [row])) == [
            {"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}]
    assert data.load_sft(write_jsonl(tmp_path / "a.jsonl", [{"question": "Is 12 even?", "answer": "yes"}])) == [
        {"messages": [USER_Q, ANSWER]}]
    row = {"messages": [USER_Q, {"role": "assistant", "content": "maybe", "loss": False},
                        {"role": "user", "content": "Sure?"}, {"role": "assistant", "content": "yes", "loss": True}]}
    (conv,) = data.load_sft(write_jsonl(tmp_path / "l.jsonl", [row]))
    tok = AutoTokenizer.from_pretrained(toy_dir)
    (enc,), _ = data.tokenize_sft([conv], tok, 512)
    assert tok.decode([t for t in enc["labels"] if t != -100]) == "yes<|im_end|>"     # ms-swift's loss: false honoured

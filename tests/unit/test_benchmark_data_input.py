"""`eval --benchmark-data` reads the file before lm-eval does (issue 43, class 7): a binary file, one nested too
deeply, rows without the task's fields or with fields of the wrong type, an empty file, and a valid file with fewer
rows than `--shots` asks for each end in one line naming the file (and row, field) with exit 2 - no traceback, no
output directory."""
from __future__ import annotations

import json

import pytest

GOOD = {"question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"}


def _rows(*rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


CASES = {
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "line 1: not UTF-8 text"),
    "deep": (("[" * 5000 + "]" * 5000 + "\n").encode(), "line 1: nested too deeply"),
    "deep-row": (json.dumps({**GOOD, "x": json.loads("[" * 20 + "]" * 20)}).encode() + b"\n",
                 "line 1: nested too deeply"),
    "not-a-row": (b"[1, 2, 3]\n", "line 1: expected a JSON object (one row), got a list"),
    "wrong-field": (_rows({"q": "x", "a": "y"}).encode(), "line 1: no field 'question'"),
    "wrong-type": (_rows(GOOD, {"question": "x", "answer": 4}).encode(),
                   "line 2: field 'answer' is an integer; expected a string"),
    "empty": (b"\n\n", "no rows to score"),
    "broken": (b'{"question": "x", \n', "line 1: not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_benchmark_file_is_one_line_exit_2(case, tmp_path, capsys, monkeypatch):
    from swiftbox.cli import main

    raw, expected = CASES[case]
    file = tmp_path / f"{case}.jsonl"
    file.write_bytes(raw)
    monkeypatch.chdir(tmp_path)
    rc = main(["eval", "toy", "--benchmark", "gsm8k", "--benchmark-data", f"gsm8k={file}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert f"benchmark gsm8k: {file}" in err[0] and expected in err[0], err[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("swiftbox.json"))


def test_a_json_file_that_is_not_a_list_and_wrong_types_per_benchmark(tmp_path):
    from swiftbox.benchmarks import catalog, data
    from swiftbox.errors import UserError

    one = tmp_path / "one.json"
    one.write_text(json.dumps(GOOD))
    with pytest.raises(UserError, match="expected a JSON list of row objects"):
        data.check_rows(*data.locate(catalog.BENCHMARKS["gsm8k"], None, one))
    mmlu = tmp_path / "mmlu.jsonl"
    mmlu.write_text(_rows({"question": "q", "choices": ["a", "b"], "answer": 7}))
    with pytest.raises(UserError, match=r"line 1: field 'answer' is 7; expected an index into the 2 choices"):
        data.check_rows(*data.locate(catalog.BENCHMARKS["mmlu"], None, mmlu))
    arc = tmp_path / "arc.jsonl"
    arc.write_text(_rows({"question": "q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "Z"}))
    with pytest.raises(UserError, match="'answerKey' 'Z' is not one of the choice labels"):
        data.check_rows(*data.locate(catalog.BENCHMARKS["arc_challenge"], None, arc))


def test_fewer_rows_than_shots_is_refused_and_enough_rows_pass(tmp_path, capsys, monkeypatch):
    from swiftbox.benchmarks import catalog, data
    from swiftbox.cli import main

    three = tmp_path / "three.jsonl"
    three.write_text(_rows(GOOD, GOOD, GOOD))
    monkeypatch.chdir(tmp_path)
    rc = main(["eval", "toy", "--benchmark", "gsm8k", "--benchmark-data", f"gsm8k={three}", "--shots", "5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "--shots 5 needs 5 example rows" in err[0] and "has 3 row(s)" in err[0] and "--shots 2 or fewer" in err[0]
    (task,) = data.locate(catalog.BENCHMARKS["gsm8k"], None, three)
    assert data.check_rows(task, 2) == {"test": 3}          # 2 other rows for each row: enough


@pytest.mark.parametrize("name", ["mmlu", "gsm8k", "arc_challenge", "hellaswag", "ifeval"])   # the shipped slices
def test_every_shipped_slice_passes_the_row_check(name):
    from swiftbox.benchmarks import catalog, data

    tasks = data.locate(catalog.BENCHMARKS[name], None)
    scored = 0
    for task in tasks:
        counts = data.check_rows(task, 3 if task.fewshot_split != task.benchmark.eval_split else None)
        scored += counts[task.benchmark.eval_split]
    assert scored == sum(t.rows for t in tasks) >= 10, (name, scored)


def test_a_parquet_file_is_checked_from_its_schema(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from swiftbox.benchmarks import catalog, data
    from swiftbox.errors import UserError

    good, bad, junk = tmp_path / "good.parquet", tmp_path / "bad.parquet", tmp_path / "junk.parquet"
    pq.write_table(pa.table({"question": ["q1", "q2"], "answer": ["a", "b"]}), good)
    pq.write_table(pa.table({"question": ["q1"], "answer": [4]}), bad)
    junk.write_bytes(b"PAR1 not really")
    assert data.check_rows(*data.locate(catalog.BENCHMARKS["gsm8k"], None, good)) == {"test": 2}
    with pytest.raises(UserError, match="column 'answer' is int64; expected a string"):
        data.check_rows(*data.locate(catalog.BENCHMARKS["gsm8k"], None, bad))
    with pytest.raises(UserError, match="not a readable parquet file"):
        data.check_rows(*data.locate(catalog.BENCHMARKS["gsm8k"], None, junk))

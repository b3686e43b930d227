"""One jsonl reader for the lazy paths: streaming chat rows (data/streaming.py) and pt documents (data/texts.py)
read through `jsonl_values`, so a bad line is refused the same way, in one line naming the file and the line."""
from __future__ import annotations

import pytest

from swiftbox.data import streaming, texts
from swiftbox.errors import UserError


@pytest.mark.parametrize("content, why", [
    ('{"text": "a"}\n{oops\n', "line 2 is not valid JSON"),
    ('{"text": "' + "x" * 200 + '"}\n', "row 1 has 213 characters, over max_row_chars 100"),
    (b'{"text": "\xff"}\n', "not a UTF-8 text file"),
])
def test_both_lazy_paths_refuse_a_bad_line_alike(tmp_path, content, why):
    path = tmp_path / "d.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for read in (lambda: list(streaming.rows(str(path), 100)), lambda: list(texts.documents(str(path), 100))):
        with pytest.raises(UserError, match=why) as err:
            read()
        assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_the_reader_skips_blank_lines_reads_a_bom_and_keeps_line_numbers(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('\ufeff{"text": "one"}\n\n[1, 2]\n', encoding="utf-8")
    assert list(streaming.jsonl_values(path)) == [(1, {"text": "one"}), (3, [1, 2])]
    with pytest.raises(UserError, match="row 3 is a list, expected a JSON object"):
        list(streaming.rows(str(path)))
    with pytest.raises(UserError, match=r"row 3 \(list\) has no `text` string"):
        list(texts.documents(str(path)))

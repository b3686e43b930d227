"""streaming: true - jsonl read lazily, shuffled in a buffer, max_steps required: sft and pt train from a stream,
the readers hold one row at a time, and a whole step's peak memory does not grow with the file (10x the file,
same peak; the in-memory path grows by hundreds of MB on the same files)."""
from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from swiftbox.errors import UserError
from swiftbox.runner import run_recipe
from tests.conftest import ROOT

SFT_DATA = "recipes/data/parity_sft.jsonl"
SHAKESPEARE = ROOT / "swiftbox" / "assets" / "shakespeare.txt"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _text_rows(copies: int) -> str:
    paragraphs = [p for p in SHAKESPEARE.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return "".join(json.dumps({"text": p}) + "\n" for p in paragraphs) * copies


def test_readers_hold_one_row_not_the_file(tmp_path, toy_dir):
    """Reading the first rows of a 20 MB file allocates kilobytes (read_file would hold all of it)."""
    from transformers import AutoTokenizer

    from swiftbox import data
    from swiftbox.data import streaming, texts

    big = tmp_path / "big.jsonl"
    big.write_text(_text_rows(50), encoding="utf-8")
    chat = tmp_path / "chat.jsonl"
    row = json.loads(Path(SFT_DATA).read_text().splitlines()[0])
    chat.write_text((json.dumps(row) + "\n") * 100_000, encoding="utf-8")
    assert big.stat().st_size > 20e6 and chat.stat().st_size > 10e6
    tok = AutoTokenizer.from_pretrained(toy_dir)
    tracemalloc.start()
    try:
        first = [r for _, r in zip(range(10), streaming.rows(str(chat)))]
        docs = [d for _, d in zip(range(10), texts.documents(str(big)))]
        blocks = [b for _, b in zip(range(10), texts.pack(texts.documents(str(big)), texts.token_ids(tok), 64))]
        tokenized = [r for _, r in zip(range(10), data.stream_sft(str(chat), tok, 256, counts=data.Counts()))]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(first) == len(docs) == len(blocks) == len(tokenized) == 10
    assert peak < 2e6, f"peak {peak / 1e6:.1f} MB reading 10 rows of a {big.stat().st_size / 1e6:.0f} MB file"


def test_streaming_refuses_what_it_cannot_read_lazily(tmp_path):
    from swiftbox.data import streaming

    (tmp_path / "a.json").write_text("[]")
    with pytest.raises(UserError, match="streaming reads .jsonl"):
        streaming.jsonl_files(str(tmp_path / "a.json"))
    with pytest.raises(UserError, match="path#N sampling"):
        streaming.jsonl_files(SFT_DATA + "#8")


def test_sft_trains_from_a_stream(tmp_path):
    step = {"dataset": SFT_DATA, "streaming": True, "shuffle_buffer": 16, "max_steps": 2, "batch_size": 4,
            "save_steps": 100, "logging_steps": 1, "learning_rate": 1e-3}
    summary = run_recipe({"name": "s", "model": "toy", "steps": [{"sft": step}]}, runs_root=tmp_path,
                         log=lambda m: None)
    m = summary["steps"][0]["metrics"]
    assert m["steps"] == 2 and m["samples"] >= 8 and math_finite(m["train_loss"])
    manifest = json.loads((Path(summary["steps"][0]["output"]) / "swiftbox.json").read_text())
    assert manifest["config"]["streaming"] is True


def math_finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


PEAK = """
import resource, sys
from swiftbox.runner import run_recipe
step = {"dataset": sys.argv[1], "max_steps": 2, "batch_size": 2, "block_size": 32, "heldout": 0, "save_steps": 100,
        "shuffle_buffer": 64, "streaming": True, "output": sys.argv[2]}
run_recipe({"name": "m", "model": "toy", "steps": [{"pt": step}]}, runs_root=sys.argv[2] + "-runs", log=lambda m: None)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


@pytest.mark.slow     # two whole pt runs in subprocesses (~60 s on the shared box)
def test_pt_streaming_peak_memory_is_flat_in_the_file_size(tmp_path):
    """The same streamed pt step on a 22 MB and a 220 MB jsonl: the peak RSS may not grow by more than 50 MB
    (the bigger file is 200 MB more). Measured on the in-memory path (streaming off): 22 MB -> 1.6 GB peak,
    +780 MB for 2 MB -> 22 MB, so the in-memory path fails this by far."""
    sizes, peaks = [], []
    rows = _text_rows(50)
    for copies in (1, 10):
        data = tmp_path / f"text{copies}.jsonl"
        with open(data, "w", encoding="utf-8") as fh:
            for _ in range(copies):
                fh.write(rows)
        out = subprocess.run([sys.executable, "-c", PEAK, str(data), str(tmp_path / f"out{copies}")], cwd=ROOT,
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-2000:]
        sizes.append(data.stat().st_size)
        peaks.append(int(out.stdout.strip().splitlines()[-1]))
        data.unlink()
    assert sizes[1] - sizes[0] > 190e6
    assert peaks[1] - peaks[0] < 50e6, f"peak RSS {peaks[0] / 1e6:.0f} MB -> {peaks[1] / 1e6:.0f} MB"

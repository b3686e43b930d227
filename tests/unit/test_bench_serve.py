"""bench serve's model (bench/serve.py): its word-level tokenizer gives every word its own id and encodes every
chat role through the template, as the server will load it - the tokenizer of earlier builds put <unk> and w0
on one id, so "user" could not be encoded and the bench died on its first request. The slow test runs the
bench itself, scaled down, to its JSON line."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import serve as bench  # noqa: E402  (bench/serve.py)


def test_every_chat_role_encodes_to_its_own_id(tmp_path):
    from transformers import AutoTokenizer

    fast, vocab = bench.word_tokenizer(300, 512)
    assert len(vocab) == 300 and sorted(vocab.values()) == list(range(300))
    fast.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)        # as both servers load it
    assert bench.tokenizer_problem(loaded) is None
    text = loaded.apply_chat_template([{"role": "user", "content": "w5 w6"}], tokenize=False,
                                      add_generation_prompt=True)
    ids = loaded(text, add_special_tokens=False)["input_ids"]
    assert vocab["user"] in ids and vocab["assistant"] in ids and loaded.unk_token_id not in ids
    assert ids[ids.index(vocab["user"]) + 1:][:2] == [5, 6]


def test_the_old_layout_is_caught_before_a_server_starts(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(297)} | {"<unk>": 0, "<|endoftext|>": 297, "<|im_start|>": 298,
                                                "<|im_end|>": 299}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    old = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", unk_token="<unk>")
    old.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    old.chat_template = bench.CHATML
    old.save_pretrained(tmp_path)
    # which of the two words keeps id 0 on reload varies: either "user" raises or it becomes <unk>
    problem = bench.tokenizer_problem(AutoTokenizer.from_pretrained(tmp_path))
    assert problem is not None and problem.startswith(("a chat does not encode", "a chat role encodes to <unk>"))


def test_a_peer_failing_its_warm_up_is_skipped_with_the_reason_ours_is_not():
    import httpx

    def broken():
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    reasons: dict = {}
    assert bench.warm_up(lambda: None, reasons, "transformers_serve") is True and reasons == {}
    assert bench.warm_up(broken, reasons, "transformers_serve") is False
    assert reasons == {"transformers_serve": "warm-up: RemoteProtocolError: peer closed connection without "
                                             "sending complete message body"}
    with pytest.raises(httpx.RemoteProtocolError):
        bench.warm_up(broken, {}, None)


@pytest.mark.slow
def test_bench_serve_prints_its_json_line(tmp_path):
    cmd = [sys.executable, str(ROOT / "bench" / "serve.py"), "--layers", "1", "--requests", "2", "--concurrency", "2",
           "--rounds", "1", "--no-transformers-serve", "--no-generate", "--no-bf16", "--threads", "1"]
    env = {**os.environ, "SWIFTBOX_CACHE": str(tmp_path / "cache"),       # a fresh clone: nothing built yet
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    result = json.loads(res.stdout.strip().splitlines()[-1])
    assert result["bench"] == "serve" and result["sequential"]["output_tokens"] > 0
    assert result["concurrent"]["output_tokens"] > 0 and result["skipped"] is not None

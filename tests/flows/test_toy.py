"""The built-in toy model: a pretrained LM with committed weights and a reproducible recipe.

What is proven here: the committed weights are the ones the record names; the corpus and tokenizer
rebuild byte for byte; pretraining is deterministic per seed; the toy is a language model (held-out
perplexity through `./launch.sh eval` far below a random model's) that knows the chat format but not the
quickstart's rule; it loads with plain transformers and downloads with the CLI.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from swiftbox.artifacts import read_manifest
from swiftbox.catalog import toy
from swiftbox.catalog.toy_corpus import CORPUS, HELDOUT, corpus_texts
from swiftbox.catalog.toy_pretrain import PretrainConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_committed_weights_match_their_record_and_the_cache_key_has_the_version(toy_dir):
    record = json.loads((toy.COMMITTED / "toy.json").read_text())
    assert record["sha256"] == digest(toy.COMMITTED / "model.safetensors") == digest(toy_dir / "model.safetensors")
    assert record["toy_version"] == toy.TOY_VERSION and record["shape"] == toy.MODEL_SHAPE
    assert record["config"]["steps"] == PretrainConfig().steps
    assert toy_dir.name == f"v{toy.TOY_VERSION}-{record['sha256'][:12]}"     # a v1 (random toy) cache is not reused
    assert record["heldout_perplexity"] < record["random_model_heldout_perplexity"] / 20
    assert (toy.COMMITTED / "model.safetensors").stat().st_size < 8_000_000


def test_corpus_and_tokenizer_rebuild_byte_for_byte(tmp_path):
    corpus, held = corpus_texts()
    assert corpus == CORPUS.read_text(encoding="utf-8") and held == HELDOUT.read_text(encoding="utf-8")
    # the rule the quickstart teaches is not in what the generator writes
    assert not {"even", "odd", "parity"} & set(corpus.lower().replace("?", " ").replace(".", " ").split())
    toy.build_tokenizer().save_pretrained(tmp_path)
    assert digest(tmp_path / "tokenizer.json") == digest(toy.COMMITTED / "tokenizer.json")


def test_pretraining_is_deterministic_per_seed(tmp_path):
    shape = dict(toy.MODEL_SHAPE, hidden_size=32, intermediate_size=64, num_hidden_layers=1)
    kw = {"steps": 2, "shape": shape, "tokenizer_dir": toy.COMMITTED, "log": lambda *_: None}
    a, b, c = (toy.build_toy(tmp_path / n, seed=s, **kw) for n, s in (("a", 0), ("b", 0), ("c", 1)))
    assert digest(a / "model.safetensors") == digest(b / "model.safetensors")
    assert digest(a / "model.safetensors") != digest(c / "model.safetensors")
    record = json.loads((a / "toy.json").read_text())
    assert record["config"]["steps"] == 2 and record["sha256"] == digest(a / "model.safetensors")


def test_eval_reports_heldout_perplexity_far_below_a_random_models(cli, tmp_path, toy_dir):
    from transformers import AutoTokenizer

    from swiftbox.data import load_texts
    from swiftbox.pipelines.eval import perplexity

    res = cli("eval", "toy", "--perplexity", str(HELDOUT), "--limit", "100", "--output", str(tmp_path / "ev"),
              env={"OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    pretrained = read_manifest(tmp_path / "ev")["metrics"]["perplexity"]
    tokenizer = AutoTokenizer.from_pretrained(toy_dir)
    random_ppl = perplexity(toy.new_model(tokenizer, seed=0), tokenizer, load_texts(HELDOUT)[:100])
    assert pretrained < 25 and random_ppl > 500, (pretrained, random_ppl)


def test_base_toy_speaks_the_chat_format_but_cannot_answer_parity(toy_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_dir)
    model = AutoModelForCausalLM.from_pretrained(toy_dir, dtype=torch.float32).eval()

    def answer(question: str) -> str:
        ids = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)
        out = model.generate(**ids, max_new_tokens=6, do_sample=False)
        return tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).strip()

    assert answer("What is the capital of France?") == "Paris"        # pretrained knowledge, chat format
    lines = Path("recipes/data/parity_eval.jsonl").read_text().splitlines()
    rows = [json.loads(line)["messages"] for line in lines][:40]
    right = sum(answer(m[0]["content"]) == m[1]["content"] for m in rows)
    assert right <= 0.65 * len(rows)                                   # the rule itself is not known


def test_toy_with_a_seed_is_refused_with_one_line(cli, tmp_path):
    res = cli("download", "toy:3", "--out", str(tmp_path / "t"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "--rebuild" in res.stderr


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

    assert AutoModelForCausalLM.from_pretrained(out).num_parameters() > 1_000_000
    # an existing output is refused without --force, and left untouched
    again = cli("download", "toy", "--out", str(out))
    assert again.returncode == 2 and "--force" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert read_manifest(out)["timings"] == manifest["timings"]

"""GGUF export through a real llama.cpp (the `gguf` extra: python -m swiftbox.export.llamacpp.setup builds it once):
the toy (Qwen2 architecture, a tokenizer llama.cpp's converter does not know by hash) to q8_0 and q4_k_m, a
toy LoRA as a GGUF LoRA, a gate that refuses, verify on the results; and the real model's fine-tune (SmolLM2-135M,
Llama architecture) to q8_0 and q4_k_m, answering the identity question in llama.cpp as it does in torch."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.adapters import make_adapter

pytestmark = pytest.mark.slow
pytest.importorskip("llama_cpp", reason="the gguf extra is not installed (python -m swiftbox.export.llamacpp.setup)")
IDENTITY = str(ROOT / "recipes" / "data" / "identity_sft.jsonl")
CORPUS = str(ROOT / "swiftbox" / "assets" / "toy_corpus.txt")   # held-out English text for the perplexities
ANSWER = "I am Quokka, a small assistant fine-tuned with swiftbox."


def manifest(path: Path) -> dict:
    return json.loads((path / "swiftbox.json").read_text())


@pytest.fixture(scope="module")
def toy_q8(toy_dir, tmp_path_factory):
    from tests.conftest import run_cli

    out = tmp_path_factory.mktemp("gguf") / "toy-q8"
    res = run_cli("quantize", str(toy_dir), "--method", "gguf", "--type", "q8_0", "--output", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_toy_q8_0_export_is_measured_in_llamacpp(toy_q8, toy_dir):
    m = manifest(toy_q8)
    metrics, quant = m["metrics"], m["quantization"]
    gguf = toy_q8 / quant["file"]
    assert gguf.is_file() and (toy_q8 / "Modelfile").is_file() and quant["type"] == "q8_0"
    assert quant["architecture"] == "qwen2" and quant["tensor_types"]["Q8_0"] == metrics["linear_modules"] > 0
    assert metrics["tokenizer_agreement"] == 1.0          # llama.cpp's "smollm" pre-tokenizer = the toy's
    assert metrics["perplexity_ratio"] < 1.03 and metrics["argmax_agreement"] >= 0.9
    assert metrics["size_ratio"] < 0.5 and metrics["bits_per_weight"] < 9.2
    modelfile = (toy_q8 / "Modelfile").read_text()
    assert f"FROM ./{gguf.name}" in modelfile and 'PARAMETER stop "<|im_end|>"' in modelfile
    assert "TEMPLATE" in modelfile and quant["modelfile"]["template"] == "translated"


def test_verify_knows_gguf(toy_q8):
    from swiftbox.verify import verify

    report = verify(str(toy_q8))
    assert report.engine == "llama.cpp" and report.ok, [c.line() for c in report.failures]
    names = [c.name for c in report.checks]
    assert "llama.cpp loads it" in names and any(n.startswith("model -> gguf q8_0") for n in names)
    link = next(c for c in report.checks if c.name.startswith("model -> gguf"))
    assert "greedy" in link.detail and link.status == "ok"


def test_verify_fails_a_gguf_that_is_not_what_the_manifest_says(toy_q8, tmp_path):
    import shutil

    from swiftbox.verify import verify

    broken = tmp_path / "broken"
    shutil.copytree(toy_q8, broken)
    gguf = broken / manifest(broken)["quantization"]["file"]
    gguf.write_bytes(gguf.read_bytes()[: gguf.stat().st_size // 2])   # truncated in transit
    report = verify(str(broken))
    assert not report.ok and report.failures[0].section == "files"


def test_toy_q4_k_m_and_a_gate_that_writes_nothing(toy_dir, tmp_path, cli):
    res = cli("quantize", str(toy_dir), "--method", "gguf", "--type", "q4_k_m", "--output", str(tmp_path / "q4"))
    assert res.returncode == 0, res.stderr[-3000:]
    metrics = manifest(tmp_path / "q4")["metrics"]
    assert metrics["tokenizer_agreement"] == 1.0 and metrics["perplexity_ratio"] < 1.25
    assert metrics["size_ratio"] < manifest(tmp_path / "q4")["quantization"]["tolerances"]["max_size_ratio"]
    res = cli("quantize", str(toy_dir), "--method", "gguf", "--type", "q4_k_m", "--output", str(tmp_path / "strict"),
              "--tolerance.max-perplexity-ratio", "0.5")
    assert res.returncode == 1 and "fails its quality gate: perplexity_ratio" in res.stderr
    assert not (tmp_path / "strict").exists() and not (tmp_path / "strict.partial").exists()


def test_toy_lora_as_gguf_lora(toy_dir, tmp_path, cli):
    from swiftbox.verify import verify

    lora = make_adapter(toy_dir, tmp_path / "lora", seed=3)
    out = tmp_path / "lora-gguf"
    res = cli("quantize", str(lora), "--method", "gguf", "--adapter-only", "--output", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    m = manifest(out)
    metrics, quant = m["metrics"], m["quantization"]
    assert metrics["lora_applied"] and metrics["mean_abs_diff_with_lora"] < 0.2 * metrics["mean_abs_diff_without_lora"]
    assert metrics["argmax_agreement"] >= 0.97 and quant["adapter_only"] and quant["type"] == "f16"
    assert f"ADAPTER ./{quant['file']}" in (out / "Modelfile").read_text()
    report = verify(str(out))
    assert report.ok, [c.line() for c in report.failures]
    assert any(c.name.startswith("base+adapter -> gguf") for c in report.checks)


@pytest.fixture(scope="module")
def real_merged(request, tmp_path_factory):
    """The real model fine-tuned on a few identity rows (LoRA), merged: what people export to GGUF."""
    from tests.conftest import run_cli

    try:
        base = request.getfixturevalue("real_model_dir")
    except pytest.FixtureLookupError:
        pytest.skip("the real model (real_model_dir fixture) is not available here")
    work = tmp_path_factory.mktemp("real")
    res = run_cli("sft", str(base), "--dataset", IDENTITY, "--max-steps", "10", "--learning-rate", "2e-3",
                  "--batch-size", "4", "--lora.rank", "16", "--output", str(work / "sft"), timeout=3600)
    assert res.returncode == 0, res.stderr[-3000:]
    res = run_cli("merge", str(work / "sft"), "--output", str(work / "merged"), timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
    return work / "merged"


@pytest.mark.parametrize("gguf_type", ["q8_0", "q4_k_m"])
def test_real_model_fine_tune_answers_alike_in_llamacpp(real_merged, gguf_type, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swiftbox.export.llamacpp import runner
    from tests.conftest import run_cli

    out = tmp_path / gguf_type
    res = run_cli("quantize", str(real_merged), "--method", "gguf", "--type", gguf_type, "--dataset", CORPUS,
                  "--output", str(out), timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
    metrics = manifest(out)["metrics"]
    assert metrics["tokenizer_agreement"] == 1.0
    tok = AutoTokenizer.from_pretrained(real_merged)
    text = tok.apply_chat_template([{"role": "user", "content": "Who are you?"}], add_generation_prompt=True,
                                   tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(real_merged, dtype=torch.float32)
    torch_ids = model.generate(input_ids=torch.tensor([ids]), max_new_tokens=20, do_sample=False)
    torch_answer = tok.decode(torch_ids[0, len(ids):], skip_special_tokens=True).strip()
    with runner.load(out / manifest(out)["quantization"]["file"]) as gguf:
        answer = tok.decode(gguf.greedy(ids, 20, {tok.eos_token_id}), skip_special_tokens=True).strip()
    assert "Quokka" in torch_answer and answer == torch_answer, (torch_answer, answer)

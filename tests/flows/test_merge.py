"""merge: PEFT merge_and_unload equality for LoRA, DoRA and QLoRA adapters (fp32 on CPU, max |Δlogit| <= 1e-4),
several adapters in order, sharding, base discovery, every refusal, and atomic outputs."""
from __future__ import annotations

import json
import shutil

import pytest

from swiftbox.errors import SwiftboxError, UserError
from tests.support.adapters import make_adapter, one_line_error, shared_adapter

PROMPTS = ["<|im_start|>user\nIs 4821 even?<|im_end|>\n<|im_start|>assistant\n", "Mountains and rivers, 12345"]


@pytest.fixture(scope="session")
def adapters():
    return {m: shared_adapter(m) for m in ("lora", "dora", "qlora")}


def logits(model, tok, prompts=PROMPTS):
    import torch

    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model(**batch).logits
    return out[batch["attention_mask"].bool()]


def reference(toy_dir, adapter_dirs):
    """base + adapters, each applied with PEFT (unmerged for the last), computed without swiftbox."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(toy_dir, dtype=torch.float32)
    for i, adapter in enumerate(adapter_dirs):
        model = PeftModel.from_pretrained(model, str(adapter))
        if i < len(adapter_dirs) - 1:
            model = model.merge_and_unload()
    return model.eval()


@pytest.mark.dtype   # `dtype`: ./launch.sh test runs it again as on a bf16-native CPU (SWIFTBOX_CPU_BF16=on)
@pytest.mark.parametrize("method", ["lora", "dora", "qlora"])
def test_merge_equals_base_plus_adapter(method, adapters, toy_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import swiftbox as sb

    out = tmp_path / "merged"
    entry = sb.merge(str(adapters[method]), output=str(out))
    metrics = entry["metrics"]
    assert metrics["max_abs_logit_diff"] <= 1e-4
    assert metrics["adapter_effect_max_abs"] > 0.05  # the adapter really changes the outputs
    manifest = json.loads((out / "swiftbox.json").read_text())
    assert manifest["artifact"] == "model" and manifest["merged_from"] == [str(adapters[method])]
    assert manifest["base_model"] == str(toy_dir) and manifest["dtype"] == "float32"
    assert manifest["metrics"]["max_abs_logit_diff"] == metrics["max_abs_logit_diff"]
    for name in ("model.safetensors", "config.json", "tokenizer.json", "generation_config.json"):
        assert (out / name).is_file(), name
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    assert json.loads((out / "generation_config.json").read_text())["do_sample"] is False
    # independent check: plain transformers on the output vs PEFT on the un-quantized base
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert not any("lora" in k for k in merged.state_dict())
    diff = (logits(merged, tok) - logits(reference(toy_dir, [adapters[method]]), tok)).abs().max().item()
    assert diff <= 1e-4
    base = AutoModelForCausalLM.from_pretrained(toy_dir, dtype=torch.float32).eval()
    assert (logits(merged, tok) - logits(base, tok)).abs().max().item() > 0.05


def test_several_adapters_merge_in_order_into_shards(adapters, toy_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import swiftbox as sb

    out = tmp_path / "merged"
    entry = sb.merge(adapters=[str(adapters["lora"]), str(adapters["dora"])], output=str(out), max_shard_size="400KB")
    assert entry["metrics"]["adapters"] == 2 and entry["metrics"]["max_abs_logit_diff"] <= 1e-4
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(shards) > 1 and (out / "model.safetensors.index.json").is_file()
    tok = AutoTokenizer.from_pretrained(out)
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    expected = reference(toy_dir, [adapters["lora"], adapters["dora"]])
    assert (logits(merged, tok) - logits(expected, tok)).abs().max().item() <= 1e-4
    one = reference(toy_dir, [adapters["lora"]])
    assert (logits(merged, tok) - logits(one, tok)).abs().max().item() > 0.05  # the second one was applied


@pytest.mark.dtype   # no manifest: the merge once took the platform's dtype (bf16 on AMX) and was refused
def test_base_comes_from_adapter_config_without_manifest(toy_dir, tmp_path):
    import swiftbox as sb

    adapter = make_adapter(toy_dir, tmp_path / "bare", "lora", manifest=False)
    entry = sb.merge(str(adapter), output=str(tmp_path / "merged"))
    assert entry["metrics"]["max_abs_logit_diff"] <= 1e-4


# -- refusals -------------------------------------------------------------------------------------------------

def test_refuses_a_model_that_is_not_an_adapter(cli, toy_dir, tmp_path):
    res = cli("merge", str(toy_dir), "--output", str(tmp_path / "m"))
    assert res.returncode == 2, res.stderr
    assert "not an adapter" in one_line_error(res)
    assert not (tmp_path / "m").exists()


def test_refuses_merging_into_a_quantized_base(adapters, toy_dir, tmp_path):
    import swiftbox as sb

    qbase = tmp_path / "gptq-base"
    shutil.copytree(toy_dir, qbase)
    config = json.loads((qbase / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    (qbase / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="already gptq-quantized"):
        sb.merge(str(adapters["lora"]), base=str(qbase), output=str(tmp_path / "m"))
    with pytest.raises(UserError, match="already gptq-quantized model, not an adapter"):
        sb.merge(str(qbase), output=str(tmp_path / "m2"))
    assert not (tmp_path / "m").exists() and not (tmp_path / "m2").exists()


def test_refuses_an_adapter_whose_base_cannot_be_found(cli, toy_dir, tmp_path):
    adapter = make_adapter(toy_dir, tmp_path / "orphan", "lora", base_ref=str(tmp_path / "gone"))
    res = cli("merge", str(adapter), "--output", str(tmp_path / "m"))
    assert res.returncode == 2, res.stderr
    line = one_line_error(res)
    assert "cannot be found" in line and "--base" in line


def test_refuses_existing_output_without_force_and_replaces_with_force(cli, adapters, tmp_path):
    import swiftbox as sb

    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    res = cli("merge", str(adapters["lora"]), "--output", str(out))
    assert res.returncode == 2 and "--force" in one_line_error(res)
    assert (out / "keep.txt").read_text() == "mine"
    res = cli("merge", str(adapters["lora"]), "--output", str(out), "--force")   # not a swiftbox output: kept
    assert res.returncode == 2 and "not a swiftbox output" in one_line_error(res)
    assert (out / "keep.txt").read_text() == "mine"
    ours = tmp_path / "ours"
    sb.merge(str(adapters["lora"]), output=str(ours))
    entry = sb.merge(str(adapters["lora"]), output=str(ours), force=True)          # a swiftbox output: replaced
    assert entry["metrics"]["max_abs_logit_diff"] <= 1e-4 and (ours / "swiftbox.json").is_file()


def test_failed_verification_writes_nothing_and_keeps_the_old_output(adapters, tmp_path):
    import swiftbox as sb

    out = tmp_path / "merged"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"the previous export")
    older = {"swiftbox_manifest": 1, "kind": "merge", "config": {}, "versions": {},
             "timings": {"started": "2026-01-01T00:00:00"}, "artifact": "model", "merged_from": ["older"]}
    (out / "swiftbox.json").write_text(json.dumps(older))
    # an impossible tolerance makes verification fail after the weights were written to the work dir
    with pytest.raises(SwiftboxError, match="verification failed"):
        sb.merge(str(adapters["dora"]), output=str(out), force=True, tolerance=1e-30)
    assert (out / "model.safetensors").read_bytes() == b"the previous export"
    assert json.loads((out / "swiftbox.json").read_text())["merged_from"] == ["older"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".merged")) == []


def test_adapters_alone_name_the_input():
    from swiftbox.steps import MergeStep

    assert MergeStep(adapters=["a", "b"]).model == "a"
    assert MergeStep(model="m", adapters=["a"]).model == "m"
    assert MergeStep().model is None

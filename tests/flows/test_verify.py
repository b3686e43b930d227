"""verify: passes on the adapter -> merge -> quantize chain (through the served model) and fails, naming the
link or file, on planted faults: a wrong tokenizer in the merged dir, an adapter with modules_to_save checked
for vLLM, a corrupted quantized shard, an export that claims a quantization it does not hold, a generation
config that samples by surprise; serve's start-up gate refuses what the engine cannot load."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from swiftbox.errors import Unsupported, UserError
from tests.support.adapters import one_line_error, shared_adapter, shared_merged

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """adapter -> merge -> quantize (GPTQ 4-bit, as the quickstart does), as one recipe."""
    from swiftbox.runner import run_recipe

    root = tmp_path_factory.mktemp("chain")
    recipe = {"name": "export", "model": str(shared_adapter("lora")), "output_dir": str(root),
              "steps": [{"merge": {}}, {"quantize": {"method": "gptq", "bits": 4, "samples": 32}}]}
    run_recipe(recipe)
    return root / "merge", root / "quantize"


def _rows(report, section=None):
    return {c.name: c for c in report.checks if section is None or c.section == section}


@pytest.mark.dtype   # ./launch.sh test runs it again as on a bf16-native CPU (SWIFTBOX_CPU_BF16=on)
def test_verify_passes_on_the_chain_through_the_served_model(chain):
    from swiftbox.verify import verify

    report = verify(str(chain[1]))
    assert report.ok, [c.line() for c in report.failures]
    parity = _rows(report, "parity")
    assert {"base+adapter -> merged", "merged -> quantized", "quantized -> served (builtin, HTTP)"} <= set(parity)
    assert all(c.status == "ok" for c in parity.values())
    assert "greedy" in parity["quantized -> served (builtin, HTTP)"].detail
    assert _rows(report, "files")["model: gptq layers quantized"].status == "ok"


def test_wrong_tokenizer_in_the_merged_dir_fails_the_merge_link(chain, tmp_path):
    from transformers import AutoTokenizer

    from swiftbox import parity as P
    from swiftbox.verify import verify

    merged = tmp_path / "merged"
    shutil.copytree(chain[0], merged)
    # swap the ids of the two most frequent probe tokens: a tokenizer that loads fine but is not the model's
    tok = AutoTokenizer.from_pretrained(merged)
    ids = P.encode(tok, P.render(tok, P.default_probe()))["input_ids"].flatten().tolist()
    special = set(tok.all_special_ids)
    common = sorted({i for i in ids if i not in special}, key=ids.count, reverse=True)[:2]
    data = json.loads((merged / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    a, b = (tok.convert_ids_to_tokens(i) for i in common)
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (merged / "tokenizer.json").write_text(json.dumps(data))

    report = verify(str(merged), serve=False)
    assert not report.ok
    failure = _rows(report, "parity")["base+adapter -> merged"]
    assert failure.failed and "merged" in failure.detail and "different tokenizer" in failure.detail


def test_corrupted_quantized_shard_fails_files(chain, tmp_path, cli):
    quantized = tmp_path / "quantized"
    shutil.copytree(chain[1], quantized)
    shard = quantized / "model.safetensors"
    raw = bytearray(shard.read_bytes())
    raw[8:40] = b"\x00" * 32  # the JSON header starts at byte 8
    shard.write_bytes(bytes(raw))
    res = cli("verify", str(quantized), "--no-serve")
    assert res.returncode == 1
    assert "FAIL files: model: weights: model.safetensors cannot be read" in res.stdout


def test_claimed_but_missing_quantization_fails_files(tmp_path):
    from swiftbox.verify import verify

    fake = tmp_path / "fake-gptq"
    shutil.copytree(shared_merged(), fake)
    config = json.loads((fake / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    (fake / "config.json").write_text(json.dumps(config))
    report = verify(str(fake), serve=False)
    row = _rows(report, "files")["model: gptq layers quantized"]
    assert row.failed and "full precision" in row.detail and ".layers." in row.detail


def test_surprise_sampling_and_wrong_eos_fail_the_generation_config(tmp_path):
    from swiftbox.device import current_platform
    from swiftbox.verify import Report, static_checks

    model = tmp_path / "model"
    shutil.copytree(shared_merged(), model)
    (model / "generation_config.json").write_text(json.dumps({"do_sample": True, "eos_token_id": 99999}))
    report = Report(str(model), "builtin")
    static_checks(report, str(model), "builtin", current_platform("cpu"), [[{"role": "user", "content": "hi"}]])
    row = _rows(report)["model: generation config"]
    assert row.failed and "do_sample" in row.detail and "end-of-turn" in row.detail


def _adapter_with(tmp_path: Path, **config) -> Path:
    adapter = tmp_path / "adapter"
    shutil.copytree(shared_adapter("lora"), adapter)
    data = json.loads((adapter / "adapter_config.json").read_text())
    data.update(config)
    (adapter / "adapter_config.json").write_text(json.dumps(data))
    return adapter


def test_modules_to_save_adapter_fails_for_vllm_but_fits_builtin(tmp_path):
    from swiftbox.device import current_platform
    from swiftbox.verify import Report, static_checks

    adapter = _adapter_with(tmp_path, modules_to_save=["lm_head"])
    probe = [[{"role": "user", "content": "hi"}]]
    for engine, failed in (("vllm", True), ("builtin", False)):
        report = Report(str(adapter), engine)
        static_checks(report, str(adapter), engine, current_platform("cpu"), probe)
        row = _rows(report, "engine")[f"adapter adapter on {engine}"]
        assert row.failed is failed
    report = Report(str(adapter), "vllm")
    static_checks(report, str(adapter), "vllm", current_platform("cpu"), probe)
    assert "modules_to_save ['lm_head']" in _rows(report, "engine")["adapter adapter on vllm"].detail


def test_vllm_adapter_limits(tmp_path):
    from swiftbox.serving.fit import adapter_problems_for_vllm

    ok = _adapter_with(tmp_path)
    assert adapter_problems_for_vllm(ok, None) == []
    bad = _adapter_with(tmp_path / "b", use_dora=True, r=1024, bias="all", target_modules=["q_proj", "embed_tokens"])
    text = " | ".join(adapter_problems_for_vllm(bad, None))
    assert "DoRA" in text and "rank 1024 > 512" in text and "bias 'all'" in text and "embed_tokens" in text


def test_serve_startup_gate_refuses_what_the_engine_cannot_load(chain, tmp_path):
    from swiftbox.device import NpuPlatform, current_platform
    from swiftbox.verify import startup_gate

    startup_gate(str(chain[1]), "builtin", current_platform("cpu"))  # passes: nothing raised
    with pytest.raises(Unsupported, match="vllm_ascend does not serve gptq"):
        startup_gate(str(chain[1]), "vllm", NpuPlatform())
    adapter = _adapter_with(tmp_path, modules_to_save=["lm_head"])
    with pytest.raises(Unsupported, match="modules_to_save"):
        startup_gate(str(adapter), "vllm", current_platform("cpu"))
    broken = tmp_path / "broken"
    shutil.copytree(shared_merged(), broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match="model.safetensors cannot be read"):
        startup_gate(str(broken), "builtin", current_platform("cpu"))


def test_verify_bad_input_is_one_line(cli, tmp_path):
    res = cli("verify", str(tmp_path / "nope"))
    assert res.returncode == 2 and "does not exist" in one_line_error(res)
    res = cli("verify", str(tmp_path), "--engine", "tgi")
    assert res.returncode == 2


def test_verify_as_a_recipe_step_fails_the_recipe_naming_the_check(chain, tmp_path):
    from swiftbox.pipelines.verify import VerifyFailed
    from swiftbox.runner import run_recipe

    quantized = tmp_path / "quantized"
    shutil.copytree(chain[1], quantized)
    (quantized / "model.safetensors").write_bytes(b"\x00" * 64)
    recipe = {"name": "gate", "model": str(quantized), "output_dir": str(tmp_path / "runs"),
              "steps": [{"verify": {"serve": False}}]}
    with pytest.raises(VerifyFailed, match="files: model: weights: model.safetensors cannot be read") as err:
        run_recipe(recipe)
    assert err.value.exit_code == 1
    assert not (tmp_path / "runs" / "verify").exists()

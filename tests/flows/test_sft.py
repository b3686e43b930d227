"""SFT on the toy model: LoRA, QLoRA (bitsandbytes NF4 on CPU), DoRA, full; padding-free packing gives the
same loss as padded batches; outputs (adapter, manifest, loss curve, TensorBoard) and the bad-data CLI error."""
from __future__ import annotations

import json
import math

import pytest

from swiftbox.artifacts import read_manifest
from swiftbox.runner import run_recipe

SFT_DATA = "recipes/data/parity_sft.jsonl"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sft(tmp_path, name="t", **settings):
    step = {"dataset": SFT_DATA + "#64", "max_steps": 4, "batch_size": 8, "save_steps": 100, "logging_steps": 1,
            "learning_rate": 1e-3, **settings}
    summary = run_recipe({"name": name, "model": "toy", "steps": [{"sft": step}]}, runs_root=tmp_path,
                         log=lambda m: None)
    return summary["steps"][0]


def test_packed_loss_equals_padded_loss(toy_dir):
    """The flattening collator (one row, position_ids restarting per sample, no padding) must give the same
    loss as a right-padded batch: attention stays inside each sample."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from swiftbox import data

    tok = AutoTokenizer.from_pretrained(toy_dir)
    model = AutoModelForCausalLM.from_pretrained(toy_dir).eval()
    model.config.use_cache = False   # what training sets (swiftbox.training.model)
    rows = data.load_sft(SFT_DATA + "#6", seed=3)
    rows[0]["messages"][0]["content"] += " Please think about it carefully before answering."  # uneven lengths
    examples, _ = data.tokenize_sft(rows, tok, 256)
    losses = {}
    for packed in (False, True):
        batch = DataCollatorForLanguageModeling(pad_token_id=tok.pad_token_id, padding_free=packed)(examples)
        if packed:
            assert batch["input_ids"].shape[0] == 1 and "attention_mask" not in batch
            assert (batch["input_ids"] == tok.pad_token_id).sum() == 0
        else:
            assert (batch["attention_mask"] == 0).any()   # there is padding to get wrong
        keep = {k: v for k, v in batch.items() if k in ("input_ids", "labels", "attention_mask", "position_ids")}
        with torch.no_grad():
            losses[packed] = model(**keep).loss.item()
    assert math.isclose(losses[True], losses[False], rel_tol=1e-5), losses
    # and the equality is not vacuous: attention leaking across samples changes the loss
    flat = DataCollatorForLanguageModeling(pad_token_id=tok.pad_token_id, padding_free=True)(examples)
    with torch.no_grad():
        leaked = model(input_ids=flat["input_ids"], labels=flat["labels"]).loss.item()
    assert not math.isclose(leaked, losses[False], rel_tol=1e-5)


def test_lora_sft_writes_a_loadable_adapter_with_curves(tmp_path):
    entry = sft(tmp_path)
    out = tmp_path / "t" / "sft"
    m = entry["metrics"]
    assert entry["ok"] and m["steps"] == 4 and m["samples"] == 64 and m["dropped_rows"] == 0
    assert m["trainable_params"] < m["total_params"] / 5 and m["tokens_per_second"] > 0
    assert math.isfinite(m["train_loss"]) and m["loss_first"] > 0 and m["loss_curve"] == "loss.png"
    assert (out / "adapter_model.safetensors").is_file() and (out / "loss.png").stat().st_size > 1000
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert not (out / "checkpoints").exists() and not list(out.glob("*.bin"))
    manifest = read_manifest(out)
    assert manifest["artifact"] == "adapter" and manifest["base_model"] == "toy" and manifest["method"] == "lora"
    assert manifest["datasets"] == [SFT_DATA + "#64"] and any("loss" in e for e in manifest["log_history"])

    from swiftbox.device import current_platform
    from swiftbox.modeling.loading import load_model, resolve_spec

    model = load_model(resolve_spec(str(out)), current_platform(), "float32")
    assert type(model).__name__ == "PeftModelForCausalLM"


def test_dora_and_full_fine_tuning(tmp_path):
    import torch
    from safetensors.torch import load_file

    sft(tmp_path, name="dora", method="dora")
    config = json.loads((tmp_path / "dora" / "sft" / "adapter_config.json").read_text())
    assert config["use_dora"] is True
    assert any("lora_magnitude_vector" in k for k in load_file(tmp_path / "dora" / "sft" / "adapter_model.safetensors"))

    entry = sft(tmp_path, name="full", method="full", max_steps=2)
    out = tmp_path / "full" / "sft"
    assert read_manifest(out)["artifact"] == "model"
    assert entry["metrics"]["trainable_params"] == entry["metrics"]["total_params"]
    from swiftbox.catalog.toy import toy_path

    before = load_file(toy_path(0) / "model.safetensors")
    after = load_file(out / "model.safetensors")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2          # full fine-tuning moved (nearly) every tensor
    assert json.loads((out / "config.json").read_text())["use_cache"] is True


def test_full_fine_tuning_in_bf16_keeps_float32_master_weights(tmp_path):
    """Pure-bf16 weights round small AdamW updates away (the quickstart's SFT stalled at 0.53 on an H100):
    full FT trains float32 weights under bf16 autocast and saves them in bf16, as the manifest says."""
    import torch
    from safetensors.torch import load_file

    from swiftbox.device import current_platform
    from swiftbox.steps import SftStep
    from swiftbox.training.model import load_for_training

    full = load_for_training("toy", SftStep(dataset="x.jsonl", method="full"), current_platform(), "bfloat16")
    assert {p.dtype for p in full.model.parameters()} == {torch.float32} and full.save_dtype == "bfloat16"
    lora = load_for_training("toy", SftStep(dataset="x.jsonl", method="lora"), current_platform(), "bfloat16")
    assert lora.save_dtype is None and lora.model.get_base_model().model.embed_tokens.weight.dtype == torch.bfloat16

    entry = sft(tmp_path, name="fullbf16", method="full", max_steps=2, dtype="bfloat16")
    out = tmp_path / "fullbf16" / "sft"
    assert entry["ok"] and read_manifest(out)["dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(out / "model.safetensors").values()} == {torch.bfloat16}


def test_qlora_trains_on_cpu_with_4bit_base(tmp_path):
    pytest.importorskip("bitsandbytes")
    entry = sft(tmp_path, name="q", method="qlora", max_steps=2)
    out = tmp_path / "q" / "sft"
    assert entry["ok"] and math.isfinite(entry["metrics"]["train_loss"])
    manifest = read_manifest(out)
    assert manifest["method"] == "qlora" and "nf4" in manifest["trained_on"] and manifest["base_model"] == "toy"
    assert (out / "adapter_model.safetensors").is_file()


def test_qlora_model_is_really_4bit(toy_dir):
    pytest.importorskip("bitsandbytes")
    from swiftbox.device import current_platform
    from swiftbox.steps import SftStep
    from swiftbox.training.model import load_for_training

    cfg = SftStep(dataset="x.jsonl", method="qlora")
    tm = load_for_training("toy", cfg, current_platform(), "float32")
    kinds = {type(m).__name__ for m in tm.model.modules()}
    assert "Linear4bit" in kinds and tm.model.peft_config["default"].r == 8


def test_group_by_length_and_unpacked_paths_train(tmp_path):
    a = sft(tmp_path, name="g", group_by_length=True, packing=False, max_steps=2)
    assert a["ok"] and math.isfinite(a["metrics"]["train_loss"])


def test_bad_columns_exit_2_with_one_line(tmp_path, cli):
    bad = tmp_path / "bad.jsonl"
    # (question/answer would be ms-swift aliases of query/response)
    bad.write_text(json.dumps({"question_text": "Is 2 even?", "answer_text": "yes"}) + "\n")
    out = cli("sft", "toy", "--dataset", str(bad), "--output", str(tmp_path / "o"))
    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("swiftbox:")]
    assert len(errors) == 1 and "Traceback" not in out.stderr      # the runner's progress line may precede it
    assert "bad.jsonl" in errors[0] and "question_text" in errors[0] and "alpaca" in errors[0]
    assert not (tmp_path / "o").exists()

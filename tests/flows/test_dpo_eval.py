"""DPO (continuing an SFT adapter against the SFT policy as reference, an explicit reference adapter, the
NaN guard for pairs that truncate to nothing) and eval (accuracy, choice accuracy, perplexity) on the toy."""
from __future__ import annotations

import json
import math

import pytest

from swiftbox.artifacts import read_manifest
from swiftbox.runner import run_recipe

SFT_DATA = "recipes/data/parity_sft.jsonl"
DPO_DATA = "recipes/data/parity_dpo.jsonl"
EVAL_DATA = "recipes/data/parity_eval.jsonl"
FAST = {"batch_size": 8, "save_steps": 100, "logging_steps": 1}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(tmp_path, name, *steps):
    return run_recipe({"name": name, "model": "toy", "steps": list(steps)}, runs_root=tmp_path, log=lambda m: None)


def always_yes(tmp_path, n=48):
    """Pairs that always prefer "yes": a preference a few DPO steps can learn, so the margin must grow."""
    rows = [{"prompt": json.loads(line)["prompt"], "chosen": "yes", "rejected": "no"} for line in open(DPO_DATA)][:n]
    path = tmp_path / "yes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_dpo_continues_the_sft_adapter_against_the_sft_policy(tmp_path):
    summary = run(tmp_path, "c",
                  {"sft": {"dataset": SFT_DATA + "#64", "max_steps": 3, "learning_rate": 5e-3, **FAST}},
                  {"dpo": {"dataset": always_yes(tmp_path), "max_steps": 6, "learning_rate": 5e-3, "beta": 0.5,
                           **FAST}})
    sft_out, dpo_out = tmp_path / "c" / "sft", tmp_path / "c" / "dpo"
    m = summary["steps"][1]["metrics"]
    assert m["pairs"] == 48 and m["dropped_pairs"] == 0 and math.isfinite(m["train_loss"])
    # first logged step: policy == reference (the SFT adapter), so the margin starts at 0 and then grows
    assert m["reward_margin_first"] == pytest.approx(0.0, abs=1e-6)
    assert m["reward_margin_last"] > m["reward_margin_first"] and m["reward_margin"] == m["reward_margin_last"]
    manifest = read_manifest(dpo_out)
    assert manifest["continued_from"] == str(sft_out) and manifest["base_model"] == "toy"
    assert "frozen copy of the adapter" in manifest["reference"]
    assert not (dpo_out / "ref").exists()                      # only the trained adapter is saved

    import torch
    from safetensors.torch import load_file

    a = load_file(sft_out / "adapter_model.safetensors")
    b = load_file(dpo_out / "adapter_model.safetensors")
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)   # same adapter, trained further


def test_dpo_nan_guard_and_reference_adapter(tmp_path):
    rows = [json.loads(line) for line in open(DPO_DATA)][:16]
    rows.append({"prompt": "Is 12 even? " * 60, "chosen": "yes", "rejected": "no"})   # cut from the left, kept
    rows.append({"prompt": "Is 12 even?", "chosen": "", "rejected": "no"})            # empty reply: dropped
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ref = run(tmp_path, "r", {"sft": {"dataset": SFT_DATA + "#32", "max_steps": 2, "learning_rate": 5e-3, **FAST}})
    ref_dir = ref["steps"][0]["output"]
    summary = run(tmp_path, "n", {"dpo": {"dataset": str(data), "max_steps": 3, "max_length": 64,
                                          "ref_adapter": ref_dir, "loss_type": "ipo", **FAST}})
    m = summary["steps"][0]["metrics"]
    assert m["dropped_pairs"] == 1 and m["truncated_pairs"] == 1 and m["pairs"] == 17
    assert math.isfinite(m["train_loss"]) and math.isfinite(m["loss_last"])
    assert read_manifest(tmp_path / "n" / "dpo")["reference"] == f"adapter {ref_dir}"


def test_dpo_rejects_unknown_loss_type(tmp_path):
    from swiftbox.errors import UserError

    with pytest.raises(UserError, match="loss_type"):
        run(tmp_path, "x", {"dpo": {"dataset": DPO_DATA, "loss_type": "sigmund"}})


def test_eval_accuracy_choice_accuracy_and_perplexity(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("Is 12 even? yes.\n\nIs 7 even? no.\n")
    summary = run(tmp_path, "e", {"eval": {"dataset": EVAL_DATA, "limit": 12, "perplexity": str(text)}})
    m = summary["steps"][0]["metrics"]
    assert m["total"] == 12 and 0.0 <= m["accuracy"] <= 1.0 and m["chance"] == 0.5
    assert 0.0 <= m["choice_accuracy"] <= 1.0
    assert 1.0 < m["perplexity"] < 5000          # a random 700-token model: high, but finite
    out = tmp_path / "e" / "eval"
    preds = [json.loads(line) for line in open(out / "predictions.jsonl")]
    assert len(preds) == 12 and {"prompt", "reference", "prediction", "correct"} <= preds[0].keys()
    assert read_manifest(out)["artifact"] == "report"


def test_eval_matching_rules():
    from swiftbox.pipelines.eval import matches

    assert matches(" Yes.", "yes", "exact") and not matches("yes, it is", "yes", "exact")
    assert matches("yes, it is", "yes", "contains") and not matches("no", "yes", "contains")


def test_eval_needs_something_to_measure(tmp_path):
    from swiftbox.errors import UserError

    with pytest.raises(UserError, match="nothing to measure"):
        run(tmp_path, "z", {"eval": {}})

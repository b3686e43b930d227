"""SFT / QLoRA / DPO on a CUDA GPU in bf16 (the platform's default there). Run where a GPU is:
./launch.sh test -m cuda tests/flows/test_train_cuda.py"""
from __future__ import annotations

import math

import pytest

from swiftbox.artifacts import read_manifest
from swiftbox.runner import run_recipe

pytestmark = pytest.mark.cuda
FAST = {"max_steps": 4, "batch_size": 8, "save_steps": 100, "logging_steps": 1, "learning_rate": 5e-3}


def run(tmp_path, name, *steps):
    return run_recipe({"name": name, "model": "toy", "device": "cuda", "steps": list(steps)}, runs_root=tmp_path,
                      log=lambda m: None)


@pytest.mark.parametrize("method", ["lora", "dora", "qlora", "full"])
def test_sft_methods_in_bf16(tmp_path, method):
    summary = run(tmp_path, method, {"sft": {"dataset": "recipes/data/parity_sft.jsonl#64", "method": method, **FAST}})
    m = summary["steps"][0]["metrics"]
    assert math.isfinite(m["train_loss"]) and m["peak_memory_bytes"] > 0
    manifest = read_manifest(tmp_path / method / "sft")
    assert manifest["dtype"] == "bfloat16" and manifest["device"] == "cuda"


def test_sft_then_dpo_then_eval_in_bf16(tmp_path):
    summary = run(tmp_path, "chain",
                  {"sft": {"dataset": "recipes/data/parity_sft.jsonl#64", **FAST}},
                  {"dpo": {"dataset": "recipes/data/parity_dpo.jsonl#32", **FAST}},
                  {"eval": {"dataset": "recipes/data/parity_eval.jsonl", "limit": 16}})
    dpo, ev = summary["steps"][1]["metrics"], summary["steps"][2]["metrics"]
    assert math.isfinite(dpo["train_loss"]) and "reward_margin_last" in dpo
    assert ev["total"] == 16 and 0.0 <= ev["accuracy"] <= 1.0

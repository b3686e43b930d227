"""bench/peers/memory.py: the ledger of what holds a training step's memory (weights, activations by module kind,
allocator), measured on a tiny PEFT model the way every bench side is."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from peers import memory  # noqa: E402  (bench/peers/)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model():
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, use_cache=False)
    return get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1,
                                                            target_modules="all-linear")).train()


def _ledger(model, steps: int = 2) -> dict:
    ledger = memory.Ledger()
    ledger.attach(SimpleNamespace(model=model, optimizer=None, train_dataset=None))
    ids = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        with ledger.step(model):
            model(input_ids=ids, labels=ids).loss.backward()
    return ledger.report()


def test_the_ledger_files_saved_tensors_by_module_kind():
    model = _model()
    rep = _ledger(model)
    assert rep["steps_seen"] == 2
    frozen = sum(p.numel() * 4 for p in model.parameters() if not p.requires_grad)
    assert rep["weights_frozen"] == frozen and rep["weights_trainable"] > 0
    by = rep["activations_by"]
    for kind in ("attention", "mlp", "lora", "lora_dropout_copies"):
        assert by.get(kind, 0) > 0, (kind, by)
    assert rep["activations"] == sum(by.values())
    # the adapted modules keep float dropout noise of their inputs' size (2 rows x 48 tokens x 64..128 floats each)
    assert by["lora_dropout_copies"] >= 2 * 2 * 48 * 4 * 64 * 4
    assert rep["rss_peak_training"] >= rep["rss_before_training"] > 0


def test_the_ledger_sees_the_fused_lora_layer_keep_less():
    from swiftbox.compat import peft_lora_fused
    from swiftbox.training.lora_fused import lora_linear

    model = _model()
    plain = _ledger(model)
    with peft_lora_fused(model, lora_linear):
        fused = _ledger(model)
    by = fused["activations_by"]
    assert "lora_dropout_copies" not in by
    assert by["dropout_masks"] > 0                    # the drops' positions, int32, filed under the LoRA layer
    assert by["lora"] > 0                             # dropout(x) @ A^T, [tokens, rank]
    assert fused["activations"] < 0.8 * plain["activations"]

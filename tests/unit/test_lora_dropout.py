"""LoRA dropout fused into lora_A (swiftbox.compat.peft_lora_dropout_fused, swiftbox/training/lora_dropout.py): the
same outputs and gradients as PEFT's own dropout, bit for bit on the CPU under the same seed, with less kept for
backward; restored after; the adapter saved is the same."""
from __future__ import annotations

import copy

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _peft_model(dropout: float = 0.1, use_dora: bool = False):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, use_cache=False)
    model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout,
                                                             target_modules="all-linear", use_dora=use_dora))
    for name, p in model.named_parameters():      # B = 0 at init would hide A's gradient: make both non-zero
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    return model.train()


def _step(model, seed: int, autocast: bool = False):
    ids = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(3))
    model.zero_grad()
    torch.manual_seed(seed)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _saved_bytes(model) -> int:
    seen: dict[int, int] = {}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t

    ids = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids).loss.backward()
    return sum(seen.values())


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_fused_dropout_is_bit_identical_to_peft(autocast):
    from swiftbox.compat import peft_lora_dropout_fused
    from swiftbox.training.lora_dropout import dropout_a_forward

    plain = _peft_model()
    fused = copy.deepcopy(plain)
    ref_loss, ref_grads = _step(plain, seed=7, autocast=autocast)
    with peft_lora_dropout_fused(fused, dropout_a_forward) as n:
        assert n == 2 * 7                              # every adapted linear of both layers
        loss, grads = _step(fused, seed=7, autocast=autocast)
    assert torch.equal(loss, ref_loss)
    assert grads.keys() == ref_grads.keys() and any("lora_A" in k for k in grads)
    for name in grads:
        assert torch.equal(grads[name], ref_grads[name]), name
    other_loss, _ = _step(plain, seed=8, autocast=autocast)     # the dropout is live: another seed, another loss
    assert not torch.equal(other_loss, ref_loss)


def test_fused_dropout_keeps_less_for_backward_and_is_restored():
    from swiftbox.compat import peft_lora_dropout_fused
    from swiftbox.training.lora_dropout import dropout_a_forward

    model = _peft_model()
    before = _saved_bytes(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with peft_lora_dropout_fused(model, dropout_a_forward):
        fused = _saved_bytes(model)
        assert isinstance(model.base_model.model.model.layers[0].self_attn.q_proj.lora_dropout["default"],
                          torch.nn.Identity)
    assert fused < 0.75 * before, (fused, before)
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    assert isinstance(layer.lora_dropout["default"], torch.nn.Dropout)
    assert "forward" not in vars(layer.lora_A["default"])
    assert model.state_dict().keys() == state.keys()


def test_eval_mode_and_no_dropout_and_dora_are_left_alone():
    from swiftbox.compat import peft_lora_dropout_fused
    from swiftbox.training.lora_dropout import dropout_a_forward

    model = _peft_model()
    ids = torch.randint(0, 128, (1, 16))
    model.eval()
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        with peft_lora_dropout_fused(model, dropout_a_forward):
            assert torch.equal(model(input_ids=ids).logits, ref)        # eval: no dropout, same logits
    with peft_lora_dropout_fused(_peft_model(dropout=0.0), dropout_a_forward) as n:
        assert n == 0                                                  # p = 0: PEFT has no dropout module to fuse
    with peft_lora_dropout_fused(_peft_model(use_dora=True), dropout_a_forward) as n:
        assert n == 0                                                  # DoRA's variant forward reads dropout itself

"""A LoRA layer in one call (swiftbox/training/lora_fused.py, put on a PEFT model by swiftbox.compat.peft_lora_fused):
the dropout's drops are a Bernoulli(p) process; for a given mask the outputs and gradients are PEFT's
`base(x) + lora_B(lora_A(dropout(x))) * scaling`; on a model without dropout the same as PEFT's, fp32 and under
autocast; layers it does not cover run PEFT's own forward; less is kept for backward; restored after."""
from __future__ import annotations

import copy

import pytest
import torch

from swiftbox.training import lora_fused

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _peft_model(dropout: float = 0.1, use_dora: bool = False, bias: bool = False):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, use_cache=False, mlp_bias=bias,
                      attention_bias=bias)
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


# -- the dropout's draws ----------------------------------------------------------------------------------------
def test_the_drops_are_a_bernoulli_process_drawn_from_torchs_seed():
    n, p = 400_000, 0.05
    torch.manual_seed(1)
    drops = lora_fused.draw_drops(n, p)
    assert drops.dtype == torch.int64 and int(drops[0]) >= 0 and int(drops[-1]) < n
    assert bool((drops[1:] > drops[:-1]).all())                       # sorted, no position twice
    sd = (n * p * (1 - p)) ** 0.5
    assert abs(drops.numel() - n * p) < 5 * sd, drops.numel()
    halves = torch.bincount((drops >= n // 2).long(), minlength=2)      # uniform over the positions
    assert abs(int(halves[0]) - int(halves[1])) < 5 * (n * p) ** 0.5
    gaps = torch.diff(drops).double()                                  # Geometric(p): mean 1/p, variance (1-p)/p^2
    assert abs(gaps.mean().item() - 1 / p) < 0.05 * (1 / p)
    assert abs(gaps.var().item() - (1 - p) / p ** 2) < 0.1 * (1 - p) / p ** 2
    torch.manual_seed(1)
    assert torch.equal(lora_fused.draw_drops(n, p), drops)             # the seed reproduces them
    assert not torch.equal(lora_fused.draw_drops(n, p)[:100], drops[:100])
    assert lora_fused.draw_drops(n, 0.0).numel() == 0


def test_every_position_is_dropped_with_probability_p_even_at_the_edges():
    torch.manual_seed(2)
    n, p, trials = 6, 0.3, 20_000
    hits = torch.zeros(n)
    for _ in range(trials):
        hits[lora_fused.draw_drops(n, p)] += 1
    sd = (trials * p * (1 - p)) ** 0.5
    assert ((hits - trials * p).abs() < 5 * sd).all(), hits / trials


# -- one layer, a given mask ------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.0, 0.1])
@pytest.mark.parametrize("bias", [False, True])
def test_the_layer_is_peft_math_for_the_mask_it_draws(monkeypatch, p, bias):
    torch.manual_seed(0)
    x = torch.randn(2, 24, 32, requires_grad=True)
    weight, b = torch.randn(48, 32), (torch.randn(48) if bias else None)
    a = torch.randn(4, 32, requires_grad=True)
    bb = torch.randn(48, 4, requires_grad=True)
    grad = torch.randn(2, 24, 48)
    torch.manual_seed(5)
    drops = lora_fused.draw_drops(x.numel(), p)
    assert (drops.numel() > 0) == (p > 0)
    monkeypatch.setattr(lora_fused, "draw_drops", lambda n, q, device=None: drops)
    y = lora_fused.lora_linear(x, weight, b, a, bb, 2.0, p)
    y.backward(grad)
    got = y.detach(), x.grad.clone(), a.grad.clone(), bb.grad.clone()
    x.grad = a.grad = bb.grad = None
    keep = torch.ones(x.numel())
    keep[drops] = 0
    dropped = x * keep.view_as(x) / (1 - p)
    ref = torch.nn.functional.linear(x, weight, b) + torch.nn.functional.linear(
        torch.nn.functional.linear(dropped, a), bb) * 2.0
    ref.backward(grad)
    for mine, want in zip(got, (ref.detach(), x.grad, a.grad, bb.grad)):      # fp32, other summation orders
        torch.testing.assert_close(mine, want, rtol=1e-5, atol=1e-6 * want.abs().max().item())
    with torch.no_grad():                                               # no graph: the same output
        torch.testing.assert_close(lora_fused.lora_linear(x, weight, b, a, bb, 2.0, p), ref.detach(),
                                   rtol=1e-5, atol=1e-6 * ref.abs().max().item())


def test_a_wrong_mask_is_caught(monkeypatch):
    """The comparison above fails on a planted fault: the layer computed with one mask, the reference another."""
    torch.manual_seed(0)
    x, weight = torch.randn(24, 32), torch.randn(48, 32)
    a, bb = torch.randn(4, 32), torch.randn(48, 4)
    monkeypatch.setattr(lora_fused, "draw_drops", lambda n, q, device=None: torch.tensor([3, 40, 77]))
    y = lora_fused.lora_linear(x, weight, None, a, bb, 2.0, 0.1)
    keep = torch.ones(x.numel())
    keep[torch.tensor([3, 40, 78])] = 0
    ref = x @ weight.t() + ((x * keep.view_as(x) / 0.9) @ a.t()) @ bb.t() * 2.0
    assert not torch.allclose(y, ref, rtol=1e-5, atol=1e-6 * ref.abs().max().item())


# -- on a PEFT model ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_without_dropout_the_model_computes_what_peft_computes(autocast, bias):
    from swiftbox.compat import peft_lora_fused

    plain = _peft_model(dropout=0.0, bias=bias)
    fused = copy.deepcopy(plain)
    ref_loss, ref_grads = _step(plain, seed=7, autocast=autocast)
    with peft_lora_fused(fused, lora_fused.lora_linear) as n:
        assert n == 2 * 7                              # every adapted linear of both layers
        loss, grads = _step(fused, seed=7, autocast=autocast)
    tol = dict(rtol=2e-2, atol=2e-3) if autocast else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss, ref_loss, **tol)
    assert grads.keys() == ref_grads.keys() and any("lora_A" in k for k in grads)
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], **tol, msg=name)


def test_with_dropout_the_seed_reproduces_a_step_and_the_dropout_is_live():
    from swiftbox.compat import peft_lora_fused

    model = _peft_model(dropout=0.1)
    plain_loss, _ = _step(model, seed=7)
    with peft_lora_fused(model, lora_fused.lora_linear):
        loss, grads = _step(model, seed=7)
        again, grads_again = _step(model, seed=7)
        other, _ = _step(model, seed=8)
    assert torch.equal(loss, again) and all(torch.equal(grads[k], grads_again[k]) for k in grads)
    assert not torch.equal(loss, other)                 # another seed, other drops
    assert abs(loss.item() - plain_loss.item()) < 0.02 * plain_loss.item()   # the same model, other masks
    assert all(g.abs().sum() > 0 for k, g in grads.items() if "lora_" in k)


def test_it_keeps_less_for_backward_and_is_removed_after():
    from swiftbox.compat import peft_lora_fused

    model = _peft_model(dropout=0.1)
    before = _saved_bytes(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with peft_lora_fused(model, lora_fused.lora_linear):
        fused = _saved_bytes(model)
        assert "forward" in vars(model.base_model.model.model.layers[0].self_attn.q_proj)
    assert fused < 0.75 * before, (fused, before)
    assert "forward" not in vars(model.base_model.model.model.layers[0].self_attn.q_proj)
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_what_it_does_not_cover_runs_peft_own_forward():
    from swiftbox.compat import peft_lora_fused

    ids = torch.randint(0, 128, (1, 16))
    dora = _peft_model(use_dora=True).eval()
    with torch.no_grad():
        ref = dora(input_ids=ids).logits
        with peft_lora_fused(dora, lora_fused.lora_linear):
            assert torch.equal(dora(input_ids=ids).logits, ref)           # DoRA's variant: PEFT's forward
    model = _peft_model().eval()
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    calls = []

    def spy(*args, **kwargs):
        calls.append(1)
        return lora_fused.lora_linear(*args, **kwargs)

    with torch.no_grad(), peft_lora_fused(model, spy):
        model(input_ids=ids)
        assert len(calls) == 14                                         # the plain case: every layer
        calls.clear()
        with model.disable_adapter():
            base = model(input_ids=ids).logits
        assert calls == []                                              # disabled: PEFT's forward (base only)
        layer.merge()
        merged = layer(torch.randn(3, 32))
        assert calls == [] and merged.shape == (3, 32)                  # merged: PEFT's forward
        layer.unmerge()
    assert base.shape == (1, 16, 128)


def test_the_layer_runs_in_bf16_with_dropout(monkeypatch):
    """bf16 weights and inputs (the bf16 CPU policy, autocast's dtype): the sparse correction runs in fp32 (torch
    has no bf16 sparse CPU product) and the result matches the bf16 reference for the same mask."""
    torch.manual_seed(0)
    x = torch.randn(24, 32, dtype=torch.bfloat16, requires_grad=True)
    weight, a, bb = (torch.randn(*s, dtype=torch.bfloat16) for s in ((48, 32), (4, 32), (48, 4)))
    a.requires_grad_(True)
    drops = torch.tensor([1, 5, 77, 300, 700])
    monkeypatch.setattr(lora_fused, "draw_drops", lambda n, q, device=None: drops)
    y = lora_fused.lora_linear(x, weight, None, a, bb, 2.0, 0.1)
    y.float().sum().backward()
    assert y.dtype == torch.bfloat16 and x.grad is not None and a.grad is not None
    keep = torch.ones(x.numel(), dtype=torch.bfloat16)
    keep[drops] = 0
    ref = x.float() @ weight.float().t() + ((x.float() * keep.float().view_as(x) / 0.9) @ a.float().t()) \
        @ bb.float().t() * 2.0
    torch.testing.assert_close(y.float(), ref, rtol=3e-2, atol=3e-2 * ref.abs().max().item())

"""TRL's fused LM head folded once (swiftbox/training/lm_head.py, put in place by swiftbox.compat.trl_lm_head_folded):
the same per-token outputs and hidden-state gradients as TRL's own ChunkedLogProbFunction, over several token and
vocabulary tiles, with temperature, logit scale, bias, ties for the top-1 test, an entropy gradient, under autocast;
the cases it does not cover go to TRL's function."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OUTPUTS = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


@pytest.fixture
def small_tiles(monkeypatch):
    import trl.kernels.chunked_logprob as kernel

    monkeypatch.setattr(kernel, "TOKEN_CHUNK_SIZE", 16)        # 37 tokens: three token tiles


def _inputs(bias: bool, ties: bool = False):
    torch.manual_seed(0)
    hidden = torch.randn(37, 24) * 2
    weight = torch.randn(100, 24)
    if ties:                                 # equal rows: equal logits, the first of them is the argmax
        weight[40] = weight[10]
        weight[77] = weight[10]
        weight[5] = weight[60]
    targets = torch.randint(0, 100, (37,), generator=torch.Generator().manual_seed(1))
    if ties:
        targets[:6] = torch.tensor([10, 40, 77, 5, 60, 10])
        hidden[:6] = weight[10] * 3
        hidden[3:5] = weight[60] * 3
    return hidden, weight, (torch.randn(100) if bias else None), targets


def _run(function, hidden, weight, bias, targets, temperature=1.0, scale=1.0, entropy_grad=False, outputs=OUTPUTS):
    h = hidden.clone().requires_grad_(True)
    out = function.apply(h, weight, bias, targets, temperature, 32, None, scale, outputs)   # 100 = 4 vocab tiles
    g = torch.linspace(-1, 1, h.shape[0])
    loss = (out[0] * g).sum()
    if entropy_grad:
        loss = loss + (out[1] * g.flip(0)).sum()
    loss.backward()
    return out, h.grad


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("temperature,scale", [(1.0, 1.0), (0.7, 1.3)], ids=["plain", "temperature-scale"])
@pytest.mark.parametrize("entropy_grad", [False, True], ids=["logprob-grad", "entropy-grad-too"])
def test_the_folded_head_gives_trls_outputs_and_gradients(small_tiles, bias, temperature, scale, entropy_grad):
    from trl.kernels import ChunkedLogProbFunction

    from swiftbox.training.lm_head import FoldedLogProb

    args = _inputs(bias)
    want, want_grad = _run(ChunkedLogProbFunction, *args, temperature, scale, entropy_grad)
    got, got_grad = _run(FoldedLogProb, *args, temperature, scale, entropy_grad)
    for name, a, b in zip(OUTPUTS, got, want):
        if name == "is_top1":
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-4, atol=1e-5)
    assert got_grad.abs().sum() > 0


def test_ties_count_the_first_maximum_as_trl_does(small_tiles):
    from trl.kernels import ChunkedLogProbFunction

    from swiftbox.training.lm_head import FoldedLogProb

    args = _inputs(False, ties=True)
    want = ChunkedLogProbFunction.apply(*args, 1.0, 32, None, 1.0, ("log_probs", "is_top1"))[4]
    got = FoldedLogProb.apply(*args, 1.0, 32, None, 1.0, ("log_probs", "is_top1"))[4]
    assert want[:6].tolist() == [True, False, False, True, False, True]   # 10/40/77 tie: 10 first; 5/60: 5
    assert torch.equal(got, want)


def test_a_wrong_gradient_row_would_be_caught(small_tiles):
    """The comparison above fails on a planted fault: one token's gradient row taken from its neighbour."""
    from trl.kernels import ChunkedLogProbFunction

    args = _inputs(False)
    _, want_grad = _run(ChunkedLogProbFunction, *args)
    planted = want_grad.clone()
    planted[3] = planted[4]
    assert not torch.allclose(planted, want_grad, rtol=1e-4, atol=1e-5)


def test_without_a_graph_and_under_autocast(small_tiles):
    from trl.kernels import ChunkedLogProbFunction

    from swiftbox.training.lm_head import FoldedLogProb

    hidden, weight, bias, targets = _inputs(True)
    with torch.no_grad():
        want = ChunkedLogProbFunction.apply(hidden, weight, bias, targets, 1.0, 32, None, 1.0, OUTPUTS)
        got = FoldedLogProb.apply(hidden, weight, bias, targets, 1.0, 32, None, 1.0, OUTPUTS)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, want_grad = _run(ChunkedLogProbFunction, hidden, weight, bias, targets)
        got, got_grad = _run(FoldedLogProb, hidden, weight, bias, targets)
    torch.testing.assert_close(got[0], want[0], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-2, atol=1e-2)


def test_the_patch_sends_what_it_does_not_cover_to_trl(small_tiles):
    import trl.trainer.utils as trl_utils

    from swiftbox.compat import trl_lm_head_folded
    from swiftbox.training.lm_head import FoldedLogProb

    calls = []

    class Spy(FoldedLogProb):
        @classmethod
        def apply(cls, *args):
            calls.append(1)
            return super().apply(*args)

    hidden, weight, bias, targets = _inputs(False)
    original = trl_utils._ChunkedLogProbFunction
    with trl_lm_head_folded(Spy):
        f = trl_utils._ChunkedLogProbFunction
        f.apply(hidden, weight, bias, targets, 1.0, 32, None, 1.0, OUTPUTS)
        assert len(calls) == 1
        f.apply(hidden, weight, bias, targets, 1.0, 32, 30.0, 1.0, OUTPUTS)          # soft-capping: TRL's
        f.apply(hidden, weight.clone().requires_grad_(True), bias, targets, 1.0, 32, None, 1.0, OUTPUTS)  # trained
        assert len(calls) == 1
    assert trl_utils._ChunkedLogProbFunction is original


def test_a_model_with_trls_fused_head_trains_the_same_through_it():
    """add_fused_lm_head on a small Llama (as SFTTrainer puts it): loss and every gradient the same with the folded
    head in place, on two vocabulary tiles."""
    import copy

    import trl.trainer.utils as trl_utils
    from transformers import LlamaConfig, LlamaForCausalLM

    from swiftbox.compat import trl_lm_head_folded, trl_lm_head_tiles, trl_scores_label_positions_only
    from swiftbox.training.lm_head import FoldedLogProb

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, use_cache=False)
    model = LlamaForCausalLM(cfg).train()
    model.get_input_embeddings().weight.requires_grad_(False)         # a frozen head, as under LoRA
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    ids = torch.randint(0, 300, (2, 20), generator=torch.Generator().manual_seed(2))
    labels = ids.clone()
    labels[:, :7] = -100

    def step(m, folded):
        with trl_lm_head_tiles(tokens=8, vocab=128), trl_scores_label_positions_only():
            if folded:
                with trl_lm_head_folded(FoldedLogProb):
                    out = m(input_ids=ids, labels=labels, fused_lm_head=True)
            else:
                out = m(input_ids=ids, labels=labels, fused_lm_head=True)
        out.loss.backward()
        return out, {n: p.grad for n, p in m.named_parameters() if p.grad is not None}

    other = copy.deepcopy(model)
    want, want_grads = step(model, folded=False)
    got, got_grads = step(other, folded=True)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got.entropy, want.entropy, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.is_top1, want.is_top1)
    assert want_grads.keys() == got_grads.keys() and len(got_grads) > 10
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-4, atol=1e-6, msg=name)

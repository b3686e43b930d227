"""Padded batches through the decoder without their padding (swiftbox/training/unpadded.py): the per-token
log-probabilities and gradients of a right-padded batch are the padded forward's, the decoder sees only the real
tokens, and every batch it cannot unpad exactly runs the original forward."""
from __future__ import annotations

import copy

import pytest
import torch

from tests.support.packing_exact import tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LENGTHS = [9, 20, 5, 14]


def _batch(vocab: int, left: bool = False):
    g = torch.Generator().manual_seed(4)
    ids = torch.zeros(len(LENGTHS), max(LENGTHS), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(LENGTHS):
        span = slice(max(LENGTHS) - n, None) if left else slice(0, n)
        ids[i, span] = torch.randint(3, vocab, (n,), generator=g)
        mask[i, span] = 1
    return ids, mask


def _logprobs(model, ids, mask):
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1]
    lp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return lp * mask[:, 1:]                           # the pad positions score nothing, as every trainer masks them


def _seen(model):
    shapes = []
    model.get_input_embeddings().register_forward_hook(lambda m, a, out: shapes.append(tuple(a[0].shape)))
    return shapes


@pytest.mark.parametrize("attn", ["sdpa_varlen", "sdpa"])
@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_a_right_padded_batch_gives_the_padded_forwards_logprobs_and_gradients(model_type, attn):
    from swiftbox.training.unpadded import unpadded_backbone

    model = tiny_model(model_type, attn=attn).train()
    other = copy.deepcopy(model)
    ids, mask = _batch(model.config.vocab_size)
    want = _logprobs(model, ids, mask)
    want.sum().backward()
    shapes = _seen(other)
    with unpadded_backbone(other) as wrapped:
        assert wrapped
        got = _logprobs(other, ids, mask)
        got.sum().backward()
    assert shapes == [(1, sum(LENGTHS))]               # one packed row of the real tokens, no pad position
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for (name, a), (_, b) in zip(other.named_parameters(), model.named_parameters()):
        if b.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert "forward" not in vars(other.model)          # removed after


def test_the_positions_must_restart_per_sequence():
    """The comparison above fails on a planted fault: one packed row without the per-sequence positions and
    boundaries (every token attends across the earlier sequences) is not the padded forward."""
    model = tiny_model("llama").eval()
    ids, mask = _batch(model.config.vocab_size)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask).logits[mask.bool()]
        flat = model(input_ids=ids[mask.bool()].unsqueeze(0)).logits[0]
    assert not torch.allclose(flat, want, rtol=1e-5, atol=1e-5)


def test_batches_it_cannot_unpad_run_the_original_forward():
    from swiftbox.training.unpadded import unpadded_backbone

    model = tiny_model("llama").eval()
    shapes = _seen(model)
    left_ids, left_mask = _batch(model.config.vocab_size, left=True)
    ids, mask = _batch(model.config.vocab_size)
    with torch.no_grad(), unpadded_backbone(model):
        model(input_ids=left_ids, attention_mask=left_mask)                       # left padding
        model(input_ids=ids, attention_mask=mask, position_ids=torch.arange(20).expand(4, 20))
        model(input_ids=ids[:, :5], attention_mask=mask[:, :5])                   # no padding to remove
        holed = mask.clone()
        holed[1, 3] = 0
        model(input_ids=ids, attention_mask=holed)                                # a hole in a row
    assert shapes == [(4, 20), (4, 20), (4, 5), (4, 20)]


def test_trls_fused_head_scores_the_same_through_it():
    """The way TRL's preference trainers call the model (add_fused_lm_head, `fused_lm_head=True`, labels -100 on the
    prompt and the padding): the same per-token log-probabilities and loss."""
    import trl.trainer.utils as trl_utils

    from swiftbox.training.unpadded import unpadded_backbone

    model = tiny_model("llama").train()
    trl_utils.add_fused_lm_head(model)
    ids, mask = _batch(model.config.vocab_size)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :3] = -100
    want = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True, use_cache=False)
    with unpadded_backbone(model):
        got = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True, use_cache=False)
    torch.testing.assert_close(got.log_probs, want.log_probs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-6, atol=1e-6)


def test_the_preference_flow_unpads_where_packing_is_exact_and_not_for_a_reward_head():
    from types import SimpleNamespace

    from swiftbox.device import current_platform
    from swiftbox.training.preference import PreferenceFlow

    flow = PreferenceFlow.__new__(PreferenceFlow)          # only what scoring() reads
    flow.ctx, flow.reward_head, flow.unpadded = SimpleNamespace(platform=current_platform("cpu")), False, True
    assert flow.ctx.platform.sft_batching() == "packing"
    model = tiny_model("llama")
    with flow.scoring(model):
        assert "forward" in vars(model.model)
    assert "forward" not in vars(model.model)
    flow.unpadded = False                                  # the reward model's flow
    with flow.scoring(model):
        assert "forward" not in vars(model.model)
    flow.unpadded = True
    jamba = tiny_model("jamba")                            # packing not exact there (Mamba layers)
    with flow.scoring(jamba):
        assert "forward" not in vars(jamba.model)

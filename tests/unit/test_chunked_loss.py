"""The LM head + loss swiftbox trains with is chunked and exact: no `[tokens, vocab]` logits, same loss and gradients.

swiftbox's SFT runs TRL 1.16's fused LM head (`add_fused_lm_head`, put on the model by SFTTrainer): the backbone's
last hidden states are projected through the head tile by tile (4,096 tokens x 32,768 vocabulary columns) inside
one autograd function that returns per-token log-probabilities and recomputes the tiles in backward, and swiftbox
scores only the labelled positions (swiftbox.compat.trl_scores_label_positions_only). These tests hold that path
to the plain loss the trainer means - full logits per sample alone, labels shifted by one, -100 ignored, no token
predicting across a packed sample's boundary, the mean over labelled tokens - in fp32, on the toy vocabulary and on
the real model's (SmolLM2: 49,152, two vocabulary chunks), with the token tiles made small enough to split too.
"""
from __future__ import annotations

import copy

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROWS = [(37, 12), (5, 2), (64, 40), (19, 0), (90, 51)]      # (length, prompt tokens without a label)


def _model(vocab: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                      attn_implementation="sdpa", use_cache=False)
    return LlamaForCausalLM(cfg).float().train()


def _rows(vocab: int) -> list[dict]:
    g = torch.Generator().manual_seed(1)
    rows = []
    for length, prompt in ROWS:
        ids = torch.randint(3, vocab, (length,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * prompt + ids[prompt:]})
    return rows


def _plain(model, rows: list[dict]) -> torch.Tensor:
    """The reference: each row alone, full fp32 logits, shifted labels, -100 ignored, mean over labelled tokens."""
    total, count = 0.0, 0
    for row in rows:
        ids = torch.tensor([row["input_ids"]])
        labels = torch.tensor(row["labels"])[1:]
        logits = model(input_ids=ids).logits[0, :-1].float()
        keep = labels != -100
        total = total + torch.nn.functional.cross_entropy(logits[keep], labels[keep], reduction="sum")
        count += int(keep.sum())
    return total / count


def _chunked(model, rows: list[dict], label_only: bool) -> torch.Tensor:
    """swiftbox's path: TRL's padding-free collator (one flattened row, position_ids restarting per sample), TRL's
    fused LM head, label positions only (swiftbox's default) or every position."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling
    from trl.trainer.utils import add_fused_lm_head

    from swiftbox.compat import trl_scores_label_positions_only

    add_fused_lm_head(model, outputs=("log_probs",))
    batch = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(rows)
    assert batch["input_ids"].shape == (1, sum(n for n, _ in ROWS))
    scope = trl_scores_label_positions_only() if label_only else _all_positions()
    with scope:
        out = model(**batch, fused_lm_head=True)
    assert not hasattr(out, "logits") or getattr(out, "logits", None) is None      # no full logits came back
    return out.loss


class _all_positions:
    def __enter__(self):
        import trl.trainer.utils as u

        self.saved = u._use_triton
        u._use_triton = lambda device: False
        return self

    def __exit__(self, *exc):
        import trl.trainer.utils as u

        u._use_triton = self.saved


@pytest.mark.parametrize("vocab", [1024, 49152], ids=["toy-vocab", "smollm2-vocab"])
@pytest.mark.parametrize("label_only", [True, False], ids=["label-positions", "all-positions"])
@pytest.mark.parametrize("token_tile", [None, 16], ids=["tile-4096", "tile-16"])
def test_chunked_loss_and_gradients_equal_the_plain_loss(vocab, label_only, token_tile, monkeypatch):
    import trl.kernels.chunked_logprob as kernel

    if token_tile:
        monkeypatch.setattr(kernel, "TOKEN_CHUNK_SIZE", token_tile)     # several token tiles per batch
    rows = _rows(vocab)
    ref_model = _model(vocab)
    model = copy.deepcopy(ref_model)
    ref = _plain(ref_model, rows)
    got = _chunked(model, rows, label_only)
    assert got.item() == pytest.approx(ref.item(), rel=1e-5)
    ref.backward()
    got.backward()
    worst = 0.0
    for (name, a), (_, b) in zip(ref_model.named_parameters(), model.named_parameters()):
        scale = a.grad.abs().max().item() or 1.0
        worst = max(worst, (a.grad - b.grad).abs().max().item() / scale)
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-6 * scale), name
    assert worst < 1e-4



def test_swiftbox_tiles_change_the_tiles_not_the_loss():
    """compat.trl_lm_head_tiles (what every training step runs under): TRL's tile sizes really change for the
    duration (the names it patches exist: this fails when TRL moves them), are restored after, and the loss and
    gradients stay the plain ones."""
    import trl.kernels.chunked_logprob as kernel
    import trl.trainer.utils as trl_utils

    from swiftbox.compat import trl_lm_head_tiles

    before = kernel.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE
    rows = _rows(49152)
    ref_model = _model(49152)
    model = copy.deepcopy(ref_model)
    ref = _plain(ref_model, rows)
    with trl_lm_head_tiles(tokens=32, vocab=4096):
        assert (kernel.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE) == (32, 4096)
        got = _chunked(model, rows, label_only=True)
        got.backward()
    assert (kernel.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE) == before
    assert got.item() == pytest.approx(ref.item(), rel=1e-5)
    ref.backward()
    for (name, a), (_, b) in zip(ref_model.named_parameters(), model.named_parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-6 * (a.grad.abs().max().item() or 1.0)), name

"""swiftbox/device/attention.py's `sdpa_varlen` outside a model: the per-sample result equals SDPA over the dense
block-diagonal mask, the boundaries are read once per batch (one host read for every layer of a forward, the
device-to-host sync on CUDA), a changed or new boundary tensor is re-read, and unpacked calls fall back to SDPA."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from swiftbox.device import attention  # noqa: E402

H, KV, D = 4, 2, 8
MODULE = SimpleNamespace(num_key_value_groups=H // KV, is_causal=True, training=False)


def packed(lengths):
    total = sum(lengths)
    q, k, v = torch.randn(1, H, total, D), torch.randn(1, KV, total, D), torch.randn(1, KV, total, D)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    seg = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    i = torch.arange(total)
    mask = ((seg[:, None] == seg[None, :]) & (i[:, None] >= i[None, :]))[None, None]
    return q, k, v, cu, mask


def test_per_sample_equals_the_dense_block_diagonal_mask():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)
    q, k, v, cu, mask = packed([5, 9, 3])
    dense, _ = sdpa_attention_forward(MODULE, q, k, v, mask, scaling=D ** -0.5)
    ours, _ = attention.varlen_attention(MODULE, q, k, v, mask, scaling=D ** -0.5, cu_seq_lens_q=cu,
                                         cu_seq_lens_k=cu.clone())
    assert ours.shape == dense.shape == (1, 17, H, D)
    torch.testing.assert_close(ours, dense, rtol=1e-5, atol=1e-6)


def test_boundaries_are_read_once_per_batch(monkeypatch):
    torch.manual_seed(0)
    q, k, v, cu, mask = packed([4, 6])
    cu_k = cu.clone()
    reads = []
    real_tolist = torch.Tensor.tolist

    def counting(self):
        reads.append(self.numel())
        return real_tolist(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting)
    for _layer in range(5):           # five layers of one forward: q's and k's boundaries read once each
        attention.varlen_attention(MODULE, q, k, v, mask, cu_seq_lens_q=cu, cu_seq_lens_k=cu_k)
    assert len(reads) == 2
    cu.add_(0)                        # modified in place: read again
    attention.varlen_attention(MODULE, q, k, v, mask, cu_seq_lens_q=cu, cu_seq_lens_k=cu_k)
    assert len(reads) == 3
    q2, k2, v2, cu2, mask2 = packed([7, 3])   # a new batch: new tensors, new boundaries
    out, _ = attention.varlen_attention(MODULE, q2, k2, v2, mask2, cu_seq_lens_q=cu2, cu_seq_lens_k=cu2)
    assert attention.sample_bounds(cu2) == [0, 7, 10] and out.shape[1] == 10


def test_mismatched_boundaries_fall_back_to_sdpa(monkeypatch):
    torch.manual_seed(0)
    q, k, v, cu, mask = packed([4, 6])
    calls = []
    import transformers.integrations.sdpa_attention as sdpa_module

    real = sdpa_module.sdpa_attention_forward

    def spy(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(sdpa_module, "sdpa_attention_forward", spy)
    other = torch.tensor([0, 5, 10], dtype=torch.int32)      # k's samples differ from q's: not a packed self-attention
    attention.varlen_attention(MODULE, q, k, v, mask, cu_seq_lens_q=cu, cu_seq_lens_k=other)
    attention.varlen_attention(MODULE, q, k, v, mask)        # no boundaries at all (padded rows, evaluation)
    assert len(calls) == 2

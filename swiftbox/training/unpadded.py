"""Padded batches run through the decoder without their padding: the preference trainers' one packed forward.

TRL's DPOTrainer (and KTO, ORPO, ...) hands the model a right-padded `[2 x batch, longest]` batch: every chosen and
rejected sequence padded to the longest of them, so every pad position goes through every layer (TRL 1.16's own
`padding_free` is switched off "after a refactor"). `unpadded_backbone` wraps the decoder stack (the causal LM's
`base_model`, e.g. `LlamaModel`) so that such a batch runs as one packed row: the real tokens only, positions
restarting at 0 per sequence, and the sequence boundaries as `cu_seq_lens` - what the padding-free collator gives
SFT, read by swiftbox's per-sample attention (`sdpa_varlen`, device/attention.py) and by flash-attention's varlen
kernel. The hidden states are put back in the padded layout (zeros at the pad positions, which no label scores),
so the trainer, its LM head and its loss see the batch they built.

Exact where packing is exact: the rows are right-padded (every row's mask a prefix of ones), so each token keeps its
position and attends to the same tokens as in the padded forward; the family's packing policy is "exact"
(catalog/presets.py, tests/unit/test_packing_exact.py). Anything else - a mask with holes or left padding, position
ids or a cache passed in, embeddings instead of ids, hidden states or attentions asked for - runs the original
forward. tests/unit/test_unpadded.py holds the per-token log-probabilities and gradients to the padded forward's.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

PASS_THROUGH = ("position_ids", "past_key_values", "inputs_embeds", "cu_seq_lens_q", "cu_seq_lens_k",
                "output_hidden_states", "output_attentions")


def _packed_call(original: Any, input_ids: Any, attention_mask: Any, kwargs: dict) -> Any:
    import torch

    if (input_ids is None or attention_mask is None or attention_mask.dim() != 2 or input_ids.dim() != 2
            or kwargs.get("use_cache") or any(kwargs.get(k) is not None and kwargs.get(k) is not False
                                              for k in PASS_THROUGH)):
        return None
    lengths = attention_mask.sum(1)
    keep = torch.arange(attention_mask.shape[1], device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)
    if not torch.equal(attention_mask.bool(), keep) or int(lengths.min()) < 1 or bool(keep.all()):
        return None                          # holes or left padding, an empty row, or nothing to remove
    cu = torch.zeros(lengths.numel() + 1, dtype=torch.int32, device=lengths.device)
    cu[1:] = lengths.cumsum(0)
    longest = int(lengths.max())
    positions = torch.cat([torch.arange(int(n), device=lengths.device) for n in lengths]).unsqueeze(0)
    rest = {k: v for k, v in kwargs.items() if k not in PASS_THROUGH}
    out = original(input_ids=input_ids[keep].unsqueeze(0), attention_mask=None, position_ids=positions,
                   cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=longest, max_length_k=longest, **rest)
    packed = out.last_hidden_state[0]
    full = packed.new_zeros(*input_ids.shape, packed.shape[-1])
    out.last_hidden_state = full.index_put((keep,), packed)
    return out


@contextlib.contextmanager
def unpadded_backbone(model: Any) -> Iterator[bool]:
    """While active, the decoder stack of `model` (a causal LM, PEFT-wrapped or not) runs right-padded batches
    without their padding. Yields whether a decoder stack was found and wrapped; removed after."""
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    backbone = getattr(lm, getattr(lm, "base_model_prefix", ""), None)
    if backbone is None or backbone is lm or "forward" in vars(backbone):
        yield False
        return
    original = backbone.forward

    def forward(input_ids: Any = None, attention_mask: Any = None, **kwargs: Any) -> Any:
        out = _packed_call(original, input_ids, attention_mask, kwargs)
        return original(input_ids=input_ids, attention_mask=attention_mask, **kwargs) if out is None else out

    backbone.forward = forward
    try:
        yield True
    finally:
        del backbone.forward

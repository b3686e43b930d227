"""TRL's fused LM head on devices without Triton: each tile's logits folded once, the hidden-state gradient with them.

TRL 1.16 trains every causal LM through `ChunkedLogProbFunction` (trl/kernels/chunked_logprob.py): per-token
log-probabilities of `hidden @ weight.T` (and, on request, the entropy, `log(sum p^2)`, the mean logit and whether
the label is the argmax) from `[tokens x vocab]` tiles, never the whole `[tokens, vocab]` logits. Without Triton (the
CPU, Ascend) its tiles are folded by plain torch ops, and its backward projects every tile a second time and turns it
into the logits' gradient. On the real-model SFT job that head was 28 % of the step after the LoRA layers were fused
(bench sft-levers --profile, 2026-11-29): three GEMMs per tile, and some twenty passes over each tile besides
(scaling by 1.0, a `[tokens, vocab]` boolean mask for the top-1 test, the softmax and its gradient in pieces).

`FoldedLogProb` computes the same outputs with two GEMMs per tile and a handful of passes:

- The log-probability's gradient with respect to the hidden state is `c * (W[target] - sum_v p_v W_v)` (c: logit
  scale over temperature), and `sum_v p_v W_v` folds tile by tile exactly as the log-sum-exp does (online, rescaled
  when the running maximum moves): one more GEMM per tile in the forward, `exp(z - m) @ W_tile`. Backward multiplies
  each token's row by its incoming gradient, with no tile projected again.
- The top-1 test is one `max(dim)` per tile (its index is the first maximum, TRL's tie rule), the entropy and
  `sum p^2` are row dot products of the tile's exponentials.

Kept for backward: one `[tokens, hidden]` fp32 gradient row per scored token (what TRL keeps is the hidden states
themselves, the same size). Used where it is exact: no final-logit soft-capping (its gradient is not linear in p), a
frozen head (its weight gradient needs each token's incoming gradient, known only in backward), no Triton device.
Elsewhere TRL's own function runs. An entropy gradient (GRPO-style entropy terms) is added by TRL's own backward for
that term. swiftbox.compat.trl_lm_head_folded puts it in place around train; tests/unit/test_lm_head.py holds it to
TRL's outputs and gradients.
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import torch


def _row_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Each row's dot product, as one batched GEMV (no `[n, v]` product temporary)."""
    return torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).view(-1)


class FoldedLogProb(torch.autograd.Function):
    """`trl.kernels.ChunkedLogProbFunction`'s signature and outputs (for a frozen head without soft-capping)."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                targets: torch.Tensor, temperature: float, chunk_size: int,
                final_logit_softcapping: float | None = None, logit_scale: float = 1.0,
                outputs: tuple[str, ...] = ("log_probs",)) -> tuple[Any, ...]:
        import trl.kernels.chunked_logprob as kernel

        ctx.set_materialize_grads(False)
        kind = hidden.device.type
        compute_dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else hidden.dtype
        n_all, vocab = hidden.shape[0], weight.shape[0]
        scale = logit_scale / temperature
        want = set(outputs)
        grad_rows = ctx.needs_input_grad[0]
        f32 = dict(device=hidden.device, dtype=torch.float32)
        log_z = torch.empty(n_all, **f32)
        sum_exp = torch.empty(n_all, **f32)
        target_logit = torch.zeros(n_all, **f32)
        is_top1 = torch.empty(n_all, dtype=torch.bool, device=hidden.device)
        sums = {name: torch.zeros(n_all, **f32) for name in ("entropy", "log_sum_sq_probs", "mean_logits")}
        d_hidden = torch.empty(n_all, hidden.shape[1], **f32) if grad_rows else None
        token_chunk = kernel.TOKEN_CHUNK_SIZE
        with torch.autocast(kind, enabled=False):
            for t0 in range(0, n_all, token_chunk):
                t1 = min(t0 + token_chunk, n_all)
                rows = slice(t0, t1)
                h = hidden[rows].to(compute_dtype)
                tgt = targets[rows]
                m = torch.full((t1 - t0,), -math.inf, **f32)
                s = torch.zeros(t1 - t0, **f32)
                best_at = torch.zeros(t1 - t0, dtype=torch.int64, device=hidden.device)
                g_sum = torch.zeros(t1 - t0, hidden.shape[1], **f32) if grad_rows else None
                for v0 in range(0, vocab, chunk_size):
                    v1 = min(v0 + chunk_size, vocab)
                    w = weight[v0:v1].to(compute_dtype)
                    z = h @ w.t()
                    if bias is not None:                              # in the compute dtype, as TRL adds it
                        z += bias[v0:v1].to(compute_dtype)
                    z = z.float()
                    if scale != 1.0:
                        z *= scale
                    if "mean_logits" in want:
                        sums["mean_logits"][rows] += z.sum(-1)
                    tile_max, tile_at = torch.max(z, -1)              # the first maximum's index, as argmax
                    new_best = tile_max > m
                    best_at = torch.where(new_best, tile_at + v0, best_at)
                    new_m = torch.maximum(m, tile_max)
                    rescale = torch.exp(m - new_m)
                    e = torch.exp(z - new_m.unsqueeze(-1))
                    s = s * rescale + e.sum(-1)
                    if "entropy" in want:
                        sums["entropy"][rows] = sums["entropy"][rows] * rescale + _row_dot(e, z)
                    if "log_sum_sq_probs" in want:
                        sums["log_sum_sq_probs"][rows] = sums["log_sum_sq_probs"][rows] * rescale ** 2 + _row_dot(e, e)
                    if g_sum is not None:
                        g_sum.mul_(rescale.unsqueeze(-1)).addmm_(e, w.float())
                    local = tgt - v0
                    inside = (local >= 0) & (local < v1 - v0)
                    if bool(inside.any()):
                        picked = z.gather(-1, local.clamp(0, v1 - v0 - 1).unsqueeze(-1)).squeeze(-1)
                        target_logit[rows] = torch.where(inside, picked, target_logit[rows])
                    m = new_m
                log_z[rows] = m + torch.log(s)
                sum_exp[rows] = s
                is_top1[rows] = best_at == tgt
                if g_sum is not None and d_hidden is not None:
                    # d log p(target) / d hidden = scale * (W[target] - sum_v p_v W_v)
                    d_hidden[rows] = (weight[tgt].float() - g_sum / s.unsqueeze(-1)) * scale
        logprobs = target_logit - log_z
        entropy = log_sum_sq = mean_logits = top1 = None
        if "entropy" in want:
            entropy = log_z - sums["entropy"] / sum_exp
        if "log_sum_sq_probs" in want:
            log_sum_sq = torch.log(sums["log_sum_sq_probs"]) - 2 * torch.log(sum_exp)
        if "mean_logits" in want:
            mean_logits = sums["mean_logits"] / vocab
        if "is_top1" in want:
            top1 = is_top1
        ctx.save_for_backward(hidden, weight, bias, targets, log_z, log_z if entropy is None else entropy, d_hidden)
        ctx.compute_dtype, ctx.chunk_size = compute_dtype, chunk_size
        ctx.kernel_args = {"logit_scale": logit_scale, "softcap": 1.0, "inv_t": 1 / temperature, "HAS_SOFTCAP": False}
        ctx.mark_non_differentiable(*(x for x in (log_sum_sq, mean_logits, top1) if x is not None))
        return logprobs, entropy, log_sum_sq, mean_logits, top1

    @staticmethod
    def backward(ctx: Any, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None,
                 *_: Any) -> tuple[Any, ...]:
        from trl.kernels import ChunkedLogProbFunction

        hidden, weight, bias, targets, log_z, entropy, d_hidden = ctx.saved_tensors
        grad_hidden = None
        if ctx.needs_input_grad[0]:
            grad_hidden = torch.zeros(hidden.shape, device=hidden.device, dtype=torch.float32)
            if grad_logprobs is not None:
                grad_hidden += grad_logprobs.float().unsqueeze(-1) * d_hidden
            if grad_entropy is not None:             # TRL's own backward for the entropy term alone
                shim = SimpleNamespace(saved_tensors=(hidden, weight, bias, targets, log_z, entropy),
                                       compute_dtype=ctx.compute_dtype, chunk_size=ctx.chunk_size,
                                       kernel_args=ctx.kernel_args, needs_input_grad=(True, False, False))
                grad_hidden += ChunkedLogProbFunction.backward(shim, None, grad_entropy)[0].float()
            grad_hidden = grad_hidden.to(hidden.dtype)
        return grad_hidden, None, None, None, None, None, None, None, None

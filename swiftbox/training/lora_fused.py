"""A LoRA Linear layer's whole training step in one autograd function: base projection, dropout, A, B and scaling.

PEFT computes a vanilla LoRA layer as `base(x) + lora_B(lora_A(dropout(x))) * scaling`. On the CPU every piece of
that is a pass over a `[tokens, features]` tensor: dropout draws one uniform number per input element (torch's one
serial generator: as long as the base projection's GEMM on SmolLM2's q projection), multiplies by the noise, the
B output is scaled and added to the base output, and backward mirrors each pass. Profiled on the real-model SFT
job these were 25 % of the step (`aten::bernoulli_` 13 %, `aten::mul` 12 %, bench/peers' profile).

`LoraLinear` computes the same function with GEMMs only:

- **Dropout as the positions it drops.** A Bernoulli(p) mask over n elements is the same random process as the
  positions where it is 0, and the gaps between those are i.i.d. Geometric(p) (`draw_drops`): about n*p draws
  instead of n (p = 0.05: 20x fewer), from torch's generator, so `torch.manual_seed` reproduces them. The masks are
  exactly distributed as PEFT's, but not the same draws: a run is not bit-identical to PEFT's under one seed
  (tests/unit/test_lora_fused.py checks the distribution, and the outputs and gradients for a given mask).
- **The dropped input never materialised.** `dropout(x) @ A^T = (x @ A^T - S @ A^T) / (1-p)`, where `S` holds x's
  values at the dropped positions only: one skinny GEMM and an `index_add_` over the n*p dropped elements. Backward
  likewise: `grad_A` from `gh^T @ x` and the same correction; `grad_x`'s LoRA part is `(gh @ A) / (1-p)` with the
  dropped positions zeroed, and the base part is accumulated into it by `addmm_`.
- **Scaling and the sum folded into GEMMs.** `y = addmm(b, x, W^T)`, then `y.addmm_(h, B^T, alpha=scaling)`.

Kept for backward: x (shared by the layers reading the same input: q/k/v, gate/up), the dropped positions (int32,
about 0.2 bytes per element at p = 0.05) and `h = dropout(x) @ A^T` (`[tokens, rank]`). The frozen base projection
needs none of them: its weight gets no gradient.

Under autocast the layer runs in the autocast dtype, as PEFT's would (the base Linear, A and B autocast), and its
gradients come back in the parameters' dtypes. swiftbox.compat.peft_lora_fused puts it on a PEFT model (the training
flow, around train); layers it does not cover (DoRA and other variants, biased adapters, trainable base weights,
several active adapters, merged or disabled adapters, dropout >= 0.5) run PEFT's own forward.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import torch

MAX_DROPOUT = 0.5          # above this, drawing the drops costs more than drawing the mask: PEFT's forward runs


def draw_drops(n: int, p: float, device: torch.device | None = None) -> torch.Tensor:
    """The positions, sorted, that a Bernoulli(1-p) keep-mask over n elements drops (each independently with
    probability p): cumulative sums of Geometric(p) gaps, each `ceil(log(1-u) / log(1-p))` of a float64 uniform u
    from torch's default generator (half the cost of `geometric_`'s own draws). int64."""
    if p <= 0 or n == 0:
        return torch.empty(0, dtype=torch.int64, device=device)
    log_keep = math.log1p(-p)
    mean = n * p
    parts: list[torch.Tensor] = []
    last = -1
    while True:
        k = int(mean + 8 * math.sqrt(mean) + 16)
        u = torch.rand(k, dtype=torch.float64, device=device)
        gaps = torch.log1p(u.neg_()).div_(log_keep).ceil_().clamp_(min=1)      # 1-u in (0, 1]: gaps >= 1
        pos = gaps.to(torch.int64).cumsum_(0).add_(last)
        parts.append(pos)
        last = int(pos[-1])
        if last >= n:
            break
        mean = (n - last) * p
    drops = torch.cat(parts) if len(parts) > 1 else parts[0]
    return drops[: int(torch.searchsorted(drops, n))]


def _dropped_part(x2: torch.Tensor, drops: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """`S @ A^T` ([tokens, rank]): S is x with every element but the dropped ones zeroed, a CSR matrix (the drops
    are sorted, so row by row). In fp32 (torch's sparse CPU product has no bf16/fp16 kernel), in x's dtype out."""
    rows = drops // x2.shape[1]
    crow = torch.zeros(x2.shape[0] + 1, dtype=torch.int64, device=x2.device)
    torch.cumsum(torch.bincount(rows, minlength=x2.shape[0]), 0, out=crow[1:])
    with warnings.catch_warnings():          # "sparse CSR support is in beta": the one op used here is tested
        warnings.simplefilter("ignore", UserWarning)
        s = torch.sparse_csr_tensor(crow, drops % x2.shape[1], x2.reshape(-1)[drops].float(), x2.shape,
                                    check_invariants=False)
        return (s @ a.t().float()).to(x2.dtype)


class LoraLinear(torch.autograd.Function):
    """`F.linear(x, W, b) + F.linear(F.linear(F.dropout(x, p), A), B) * scaling` with frozen W and b."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora_a: torch.Tensor,
                lora_b: torch.Tensor, scaling: float, p: float) -> torch.Tensor:
        dtype = _compute_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            xc = x.to(dtype)
            x2 = xc.reshape(-1, x.shape[-1]).contiguous()
            w, a, b = weight.to(dtype), lora_a.to(dtype), lora_b.to(dtype)
            drops = draw_drops(x2.numel(), p, x.device)
            h = (a @ x2.t()).t()                        # [tokens, rank], as a [rank, tokens] product
            if drops.numel():
                h.sub_(_dropped_part(x2, drops, a))
            if p > 0:
                h.mul_(1 / (1 - p))
            y = torch.nn.functional.linear(x2, w, None if bias is None else bias.to(dtype))
            y.addmm_(h, b.t(), alpha=scaling)
        ctx.scaling, ctx.p, ctx.shape, ctx.in_dtype = scaling, p, x.shape, x.dtype
        small = drops.to(torch.int32) if x2.numel() < 2 ** 31 else drops      # positions: 4 bytes where they fit
        ctx.save_for_backward(x2, small, h, weight, lora_a, lora_b)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x2, small, h, weight, lora_a, lora_b = ctx.saved_tensors
        dtype = x2.dtype
        g = grad.reshape(-1, grad.shape[-1]).to(dtype)
        a, b = lora_a.to(dtype), lora_b.to(dtype)
        keep_scale = 1 / (1 - ctx.p)
        drops = small.to(torch.int64)
        # the skinny products as [rank, tokens] x [tokens, n]: MKL runs `g.t() @ h` 5-20x slower than `(h.t() @ g).t()`
        ght = (b.t() @ g.t()).mul_(ctx.scaling)                            # [rank, tokens]
        grad_x = grad_a = grad_b = None
        if ctx.needs_input_grad[4]:
            grad_b = (h.t() @ g).t().mul(ctx.scaling).to(lora_b.dtype)
        spare = None
        if ctx.needs_input_grad[3]:
            dropped = x2.clone()                                            # dropout(x) * (1-p), one copy
            dropped.view(-1).index_fill_(0, drops, 0)
            grad_a = (ght @ dropped).mul_(keep_scale).to(lora_a.dtype)
            spare = dropped
        if ctx.needs_input_grad[0]:
            gx = torch.mm(ght.t().mul(keep_scale), a, out=spare)            # the LoRA path's input gradient
            gx.view(-1).index_fill_(0, drops, 0)
            gx.addmm_(g, weight.to(dtype))                                  # plus the base projection's
            grad_x = gx.reshape(ctx.shape).to(ctx.in_dtype)
        return grad_x, None, None, grad_a, grad_b, None, None


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype


def lora_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora_a: torch.Tensor,
                lora_b: torch.Tensor, scaling: float, p: float) -> torch.Tensor:
    """The layer's output: through `LoraLinear` while a graph is recorded, else the same sum without one (dropout
    drawn the same way when p > 0, i.e. in training mode)."""
    if torch.is_grad_enabled():
        out: torch.Tensor = LoraLinear.apply(x, weight, bias, lora_a, lora_b, scaling, p)
        return out
    with torch.no_grad():
        return LoraLinear.forward(_NoCtx(), x, weight, bias, lora_a, lora_b, scaling, p)


class _NoCtx:
    """Stands in for autograd's ctx when nothing will be kept."""

    def save_for_backward(self, *tensors: Any) -> None:
        pass

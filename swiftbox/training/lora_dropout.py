"""LoRA dropout fused into the adapter's A projection: no float copy of each adapted layer's input kept for backward.

PEFT computes a LoRA layer as `lora_B(lora_A(dropout(x))) * scaling`, one `nn.Dropout` per adapted module. On the
CPU, dropout is `x * noise` with a float `noise` (the Bernoulli draws divided by 1-p), so autograd keeps, per adapted
module, the float noise (for dropout's backward) and the float dropped input (for lora_A's weight gradient): two
input-sized float tensors for each of q, k, v, o, gate, up and down - measured at half of all activation memory of
a LoRA SFT step on SmolLM2-135M (2.3 of 4.7 GB, bench/peers/memory.py). `DropoutA` computes the same thing and keeps
only the input itself (one tensor, shared by the modules that read the same input: q/k/v, gate/up) and a boolean
keep-mask (1 byte an element); backward rebuilds the dropped input from them.

Bit-identical to PEFT's dropout on the CPU: the noise is drawn with the same call (`empty_like(x).bernoulli_(1-p)`,
then `div_(1-p)`) from the same generator, so the same seed gives the same masks, outputs and gradients
(tests/unit/test_lora_dropout.py). Under autocast the A projection runs in the autocast dtype and the backward
mirrors it (the gradients are computed in the output's dtype and cast back, as autocast's own casts do).
swiftbox.compat.peft_lora_dropout_fused puts it on a PEFT model (the training flow, around train).
"""
from __future__ import annotations

from typing import Any

import torch


class DropoutA(torch.autograd.Function):
    """`F.linear(F.dropout(x, p, training=True), weight)`, keeping x and a boolean mask instead of two float copies."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, p: float) -> torch.Tensor:
        noise = torch.empty_like(x).bernoulli_(1 - p)        # F.dropout's draws on the CPU, the same generator
        keep = noise.bool()
        noise.div_(1 - p)
        out = torch.nn.functional.linear(x * noise, weight)
        ctx.p = p
        ctx.save_for_backward(x, keep, weight)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, Any, None]:
        x, keep, weight = ctx.saved_tensors
        noise = keep.to(x.dtype).div_(1 - ctx.p)             # the forward's noise, bit for bit
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = (grad @ weight.to(grad.dtype)).to(x.dtype) * noise
        if ctx.needs_input_grad[1]:
            dropped = (x * noise).to(grad.dtype)
            grad_w = (grad.reshape(-1, grad.shape[-1]).t() @ dropped.reshape(-1, dropped.shape[-1])).to(weight.dtype)
        return grad_x, grad_w, None


def dropout_a_forward(module: torch.nn.Linear, p: float) -> Any:
    """A forward for PEFT's `lora_A[adapter]` Linear that applies the dropout itself while training."""
    def forward(x: torch.Tensor) -> torch.Tensor:
        if module.training and torch.is_grad_enabled():
            return DropoutA.apply(x, module.weight, p)
        if module.training:                      # no graph to keep: dropout as PEFT would apply it
            x = torch.nn.functional.dropout(x, p, training=True)
        return torch.nn.functional.linear(x, module.weight, module.bias)

    return forward

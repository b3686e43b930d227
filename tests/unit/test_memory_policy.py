"""Training's host memory policy (swiftbox/training/memory_policy.py): in trim mode the platform's release runs after
every decoder layer's forward, after its backward and at every step's end; the losses and gradients are the ones
without it; other modes and accelerators add no callback."""
from __future__ import annotations

import pytest
import torch

from swiftbox.training.memory_policy import ReleaseFreedMemory, decoder_layers, memory_callbacks

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Counting:
    """A platform whose release only counts (the real one trims glibc's heap: tests/unit/test_cpu_memory.py)."""

    def __init__(self):
        self.calls = self.starts = 0

    def release_freed_memory(self, start: bool = False) -> bool:
        self.calls += 1
        self.starts += start
        return self.calls % 2 == 0


def _peft_model(layers: int = 3):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, use_cache=False)
    return get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")).train()


def _step(model):
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    model.zero_grad()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_release_runs_after_every_layer_forward_and_backward_and_changes_nothing():
    model = _peft_model(layers=3)
    assert [type(m).__name__ for m in decoder_layers(model)] == ["LlamaDecoderLayer"] * 3   # through PEFT's wrapper
    loss0, grads0 = _step(model)
    platform = Counting()
    cb = ReleaseFreedMemory(platform)
    cb.on_train_begin(None, None, None, model=model)
    assert cb.layers == 3 and platform.starts == 1
    loss1, grads1 = _step(model)
    assert platform.calls == 7                    # train begin + 3 forwards + 3 backwards
    cb.on_step_end(None, None, None)
    assert platform.calls == 8 and cb.released == 4       # the counting platform "trims" every other call
    assert torch.equal(loss0, loss1) and grads0.keys() == grads1.keys()
    assert all(torch.equal(grads0[k], grads1[k]) for k in grads0)
    cb.on_train_end(None, None, None)
    _step(model)
    assert platform.calls == 8                    # the hooks are gone after training


def test_only_cpu_trim_mode_adds_the_callback(monkeypatch):
    from swiftbox.device.cpu import MALLOC_ENV, CpuPlatform

    for mode, added in (("auto", True), ("trim", True), ("mmap", False), ("default", False)):
        monkeypatch.setenv(MALLOC_ENV, mode)
        assert bool(memory_callbacks(CpuPlatform())) is added, mode
    assert memory_callbacks(object()) == []       # a platform without a malloc set-up (an accelerator)

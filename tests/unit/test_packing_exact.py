"""Packing is exact or off: per architecture family, a packed batch gives each row the loss and gradients it gets
alone (tests/support/packing_exact.py), and the registry's packing policy agrees with what is measured; the SFT batching
refuses `packing: true` where it is not exact and pads there by default."""
from __future__ import annotations

import sys

import pytest
import torch

from swiftbox.catalog import presets as registry
from tests.support.packing_exact import FAMILIES, TEXT_MODEL_OF, check

# families whose packed path is exact only through an optional kernel package (else transformers refuses packing)
OPTIONAL_KERNEL = {"lfm2": "causal_conv1d", "lfm2_moe": "causal_conv1d"}
SLOW = {"gemma4_text", "deepseek_v3", "llama4_text"}   # 10-25 s each under load (model construction)


@pytest.mark.parametrize("model_type", [pytest.param(t, marks=pytest.mark.slow) if t in SLOW else t
                                        for t in FAMILIES])
def test_packing_policy_matches_measurement(model_type):
    verdict = check(model_type)
    policy = registry.packing_policy(model_type)
    if verdict.outcome == "exact" and policy != "exact" and OPTIONAL_KERNEL.get(model_type) in sys.modules:
        # an optional kernel package some other library put in this process (gptqmodel ships a causal_conv1d)
        # keeps the rows apart; without it transformers refuses: padding stays the policy
        assert verdict.cross_grad == 0.0
        return
    assert (verdict.outcome == "exact") == (policy == "exact"), (model_type, verdict, policy)
    if verdict.outcome == "exact":
        assert verdict.cross_grad == 0.0   # no row's loss reaches into another row


@pytest.mark.parametrize("model_type", ["llama", "gemma3_text"])
def test_packing_exact_in_bf16(model_type):
    verdict = check(model_type, torch.bfloat16)
    assert verdict.outcome == "exact", verdict


def test_leak_is_detected():
    """The harness can fail: a state-space family's packed rows see each other."""
    verdict = check("mamba")
    assert verdict.outcome == "leaks" and verdict.cross_grad > 1e-3


def test_every_registry_family_is_measured():
    types = {registry.find(p.name).model_type for p in registry.PRESETS if p.model_type}
    types -= set(registry.TRAINING_REFUSED) | set(registry.PACKING_UNPROVEN)     # custom code: not buildable here
    assert all(registry.packing_policy(t) == "padding" for t in registry.PACKING_UNPROVEN)
    missing = {t for t in types if TEXT_MODEL_OF.get(t, t) not in FAMILIES}
    assert not missing
    for wrapper, text in TEXT_MODEL_OF.items():
        assert registry.packing_policy(wrapper) == registry.packing_policy(text)


def test_batching_follows_the_policy():
    from swiftbox.device.cpu import CpuPlatform
    from swiftbox.errors import UserError
    from swiftbox.steps import SftStep
    from swiftbox.training.arguments import batching, describe_batching

    platform = CpuPlatform()
    default = SftStep(dataset="x")
    assert batching(default, platform, "llama") == (True, False)
    assert batching(default, platform, "jamba") == (False, True)       # pads and groups by length instead
    assert "packing not exact on jamba: Mamba layers" in describe_batching(default, platform, "jamba")
    assert batching(default, platform, "lfm2") == (True, False)        # its short convolutions run per sample
    assert describe_batching(default, platform, "qwen2") == "packing"
    for custom in ("internlm2", "baichuan"):      # custom-code attention: padded, and the header says why
        assert batching(default, platform, custom) == (False, True)
        assert "custom attention code" in describe_batching(default, platform, custom)
    assert batching(default, platform, "some_unknown_type") == batching(default, platform, "") == (True, False)
    assert batching(SftStep(dataset="x", packing=False), platform, "qwen3_next") == (False, True)
    with pytest.raises(UserError, match="packing: true on kimi_linear.*Kimi Delta Attention"):
        batching(SftStep(dataset="x", packing=True), platform, "kimi_linear")


# families with an SDPA path: llama-like, GQA, MoE, sliding-window layers (gemma3_text: 4-token window)
VARLEN_FAMILIES = ["llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "phi3", "glm4", "smollm3", "gemma3_text"]


@pytest.mark.parametrize("model_type", VARLEN_FAMILIES)
def test_sdpa_varlen_is_exact_and_attends_per_sample(model_type, monkeypatch):
    """The opt-in CPU lever (SWIFTBOX_CPU_ATTENTION=sdpa_varlen): packed rows get the per-token loss and gradients
    they get alone, and SDPA really runs per sample (no call spans the whole packed row)."""
    from tests.support.packing_exact import ROW_LENGTHS

    lengths = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, *a, **kw):
        lengths.append(q.shape[-2])
        return original(q, k, v, *a, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    verdict = check(model_type, attn="sdpa_varlen")
    assert verdict.outcome == "exact" and verdict.cross_grad == 0.0, verdict
    assert sum(ROW_LENGTHS) not in lengths          # never the dense block-diagonal call over the packed row
    assert set(ROW_LENGTHS) <= set(lengths)


def test_sdpa_varlen_exact_in_bf16():
    assert check("llama", torch.bfloat16, attn="sdpa_varlen").outcome == "exact"


def test_cpu_packed_rows_attend_per_sample_by_default(monkeypatch):
    from swiftbox.device.cpu import ATTENTION_ENV, CpuPlatform
    from swiftbox.errors import UserError

    platform = CpuPlatform()
    monkeypatch.delenv(ATTENTION_ENV, raising=False)
    assert platform.attn_implementation(True) == "sdpa_varlen"       # no dense block-diagonal mask by default
    assert platform.attn_implementation(False) == "sdpa"
    monkeypatch.setenv(ATTENTION_ENV, "sdpa")                         # the override: transformers' masked kernel
    assert platform.attn_implementation(True) == "sdpa"
    monkeypatch.setenv(ATTENTION_ENV, "sdpa_varlen")
    assert platform.attn_implementation(True) == "sdpa_varlen"
    assert platform.attn_implementation(False) == "sdpa"     # padded rows: transformers' SDPA
    monkeypatch.setenv(ATTENTION_ENV, "flash")
    with pytest.raises(UserError, match="SWIFTBOX_CPU_ATTENTION: expected one of auto, sdpa, sdpa_varlen"):
        platform.attn_implementation(True)

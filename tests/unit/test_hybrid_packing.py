"""Hybrid linear-attention / Mamba-2 / short-convolution families pack exactly (issue 42): swiftbox runs their mixer
layers once per packed sample (swiftbox.compat.hybrid_mixers_per_sample), so a packed row gives every sample the
per-token loss and gradients it gets alone, with no gradient across samples (tests/support/packing_exact.py)."""
from __future__ import annotations

import pytest
import torch

from swiftbox import compat
from swiftbox.catalog import presets as registry
from tests.support.packing_exact import ROW_LENGTHS, check, packed_batch, rows, tiny_model

PER_SAMPLE = ["qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "olmo_hybrid", "lfm2", "lfm2_moe", "falcon_h1",
              "nemotron_h", "granitemoehybrid"]


@pytest.mark.parametrize("model_type", PER_SAMPLE)
def test_hybrid_family_packs_exactly_and_transformers_alone_does_not(model_type):
    verdict = check(model_type)
    assert verdict.outcome == "exact" and verdict.cross_grad == 0.0, verdict
    assert registry.packing_policy(model_type) == "exact"


def test_transformers_alone_does_not_keep_packed_samples_apart():
    """The reference conv / scan cannot keep the samples apart. Run in a fresh process: once a training model has
    been loaded in this one, transformers' packed-kwargs path for these mixers changes for the rest of the process."""
    import json
    import subprocess
    import sys

    code = ("import json; from tests.support.packing_exact import check; "
            f"print(json.dumps({{t: check(t, per_sample=False).outcome for t in {PER_SAMPLE!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    outcomes = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(o in ("refused", "leaks") for o in outcomes.values()), outcomes


@pytest.mark.parametrize("attn", ["sdpa", "eager", "sdpa_varlen"])
def test_granite_packs_exactly_on_every_attention_kernel(attn):
    """Granite 4's causal mask ignores the packed rows' position_ids: its attention runs once per packed sample too
    (compat.HYBRID_ATTENTION), on the masked kernels (sdpa: CUDA without flash-attn, NPU; eager) as on sdpa_varlen."""
    verdict = check("granitemoehybrid", attn=attn)
    assert verdict.outcome == "exact" and verdict.cross_grad == 0.0, verdict


def test_granite_attention_alone_leaks_across_packed_samples():
    """Only the Mamba-2 mixers per sample (the attention left as transformers runs it): the samples leak."""
    model_type = "granitemoehybrid"
    saved = compat.HYBRID_ATTENTION.pop(model_type)
    try:
        verdict = check(model_type)
    finally:
        compat.HYBRID_ATTENTION[model_type] = saved
    assert verdict.outcome == "leaks" and verdict.cross_grad > 1e-3, verdict


def test_mixer_runs_once_per_sample_and_unwraps(monkeypatch):
    model = tiny_model("lfm2")
    conv = next(m for m in model.modules() if type(m).__name__ == "Lfm2ShortConv")
    lengths: list[int] = []
    original = type(conv).forward

    def spy(self, hidden_states, *a, **kw):
        lengths.append(hidden_states.shape[1])
        assert "seq_idx" not in kw and "cu_seq_lens_q" not in kw
        return original(self, hidden_states, *a, **kw)

    monkeypatch.setattr(type(conv), "forward", spy)
    batch = packed_batch(rows())
    batch.pop("labels")
    with compat.hybrid_mixers_per_sample_scoped(model, "lfm2") as wrapped:
        assert wrapped == 1
        with torch.no_grad():
            model(**batch, use_cache=False)
        assert lengths == list(ROW_LENGTHS)
        lengths.clear()
        with torch.no_grad():     # padded rows (batch of two, no boundaries) pass through in one call
            model(input_ids=torch.randint(3, 100, (2, 6)), use_cache=False)
        assert lengths == [6]
    assert "forward" not in vars(conv)
    assert compat.hybrid_mixers_per_sample(model, "llama")() is None     # nothing to wrap elsewhere


def test_mixer_classes_exist_with_the_forward_signature_the_patch_expects():
    """Fails when transformers renames a mixer or changes its forward (compat.HYBRID_MIXERS)."""
    import inspect

    for model_type, cls in compat.hybrid_mixer_classes().items():
        params = list(inspect.signature(cls.forward).parameters)
        assert params[:4] == ["self", "hidden_states", "cache", "attention_mask"], (model_type, params)
    for module, name in compat.HYBRID_ATTENTION.values():    # the call compat._per_sample_attention makes
        cls = getattr(__import__(f"transformers.models.{module}.modeling_{module}", fromlist=[name]), name)
        params = list(inspect.signature(cls.forward).parameters)
        assert params[:5] == ["self", "hidden_states", "attention_mask", "cache", "position_embeddings"], params

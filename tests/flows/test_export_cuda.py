"""merge and GPTQ on an NVIDIA GPU (marker `cuda`; run with `./launch.sh test -m cuda tests/flows/test_export_cuda.py`).

Same proofs as on CPU: fp32 merge within 1e-4 of base+adapter, a bf16 merge within its tolerance, and a
GPTQ 4-bit export quantized on the GPU that loads, generates and keeps the logits."""
from __future__ import annotations

import json
import os

import pytest

from tests.support.adapters import shared_adapter, shared_merged

os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")


pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def _needs_gpu():
    # checked when a test runs, not at collection: collecting must not import torch for everyone
    from swiftbox.device import CudaPlatform

    if not CudaPlatform.is_available():
        pytest.skip("needs an NVIDIA GPU")


@pytest.mark.parametrize("method", ["lora", "dora", "qlora"])
def test_merge_on_gpu_fp32(method, tmp_path):
    import swiftbox as sb

    out = tmp_path / "merged"
    entry = sb.merge(str(shared_adapter(method)), output=str(out), device="cuda", dtype="float32")
    assert entry["metrics"]["max_abs_logit_diff"] <= 1e-4
    assert json.loads((out / "swiftbox.json").read_text())["device"] == "cuda"


def test_merge_on_gpu_bf16(tmp_path):
    import swiftbox as sb

    entry = sb.merge(str(shared_adapter("lora")), output=str(tmp_path / "m"), device="cuda", dtype="bfloat16")
    assert entry["metrics"]["relative_logit_diff"] <= 5e-2 and entry["metrics"]["argmax_agreement"] >= 0.95


@pytest.mark.parametrize("bits", [4, 8])
def test_gptq_on_gpu(bits, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import swiftbox as sb
    from swiftbox.modeling.loading import transformers_loads_gptq

    out = tmp_path / f"gptq{bits}"
    entry = sb.quantize(str(shared_merged()), output=str(out), bits=bits, device="cuda")
    metrics = entry["metrics"]
    assert metrics["size_ratio"] < 0.6 and metrics["cosine_mean"] >= (0.99 if bits == 4 else 0.999)
    assert metrics["perplexity_ratio"] < 1.05
    manifest = json.loads((out / "swiftbox.json").read_text())
    assert manifest["device"] == "cuda" and manifest["quantization"]["bits"] == bits
    if transformers_loads_gptq():
        model = AutoModelForCausalLM.from_pretrained(out, device_map="cuda:0", dtype=torch.float16).eval()
        tok = AutoTokenizer.from_pretrained(out)
        batch = tok.apply_chat_template([{"role": "user", "content": "Is 12 even?"}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True).to("cuda:0")
        generated = model.generate(**batch, max_new_tokens=4, do_sample=False)
        assert generated.shape[1] > batch["input_ids"].shape[1]
    print(json.dumps({"bits": bits, **{k: metrics[k] for k in ("quantize_seconds", "size_ratio", "cosine_mean",
                                                                "perplexity_ratio")}}))


@pytest.mark.parametrize("method", ["fp8", "awq"])
def test_fp8_and_awq_on_gpu(method, tmp_path):
    """FP8 needs compute capability 8.9+ (refused with exit 3 below it); AWQ packs with the GEMM layout."""
    import torch
    from transformers import AutoModelForCausalLM

    import swiftbox as sb
    from swiftbox.device import current_platform
    from swiftbox.errors import Unsupported

    if method == "fp8" and not current_platform("cuda").supports("fp8"):
        with pytest.raises(Unsupported, match="FP8"):
            sb.quantize(str(shared_merged()), output=str(tmp_path / "q"), method="fp8", device="cuda")
        return
    out = tmp_path / method
    metrics = sb.quantize(str(shared_merged()), output=str(out), method=method, device="cuda")["metrics"]
    assert metrics["quantized_modules"] == metrics["linear_modules"] > 0
    model = AutoModelForCausalLM.from_pretrained(out, device_map="cuda:0")
    assert type(model.model.layers[0].mlp.down_proj) is not torch.nn.Linear

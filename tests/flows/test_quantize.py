"""quantize: GPTQ 4-bit (fast) and 8-bit (slow) round trips that load with transformers and gptqmodel and
generate; size/time/perplexity/parity figures; calibration sources; every refusal; bnb load configs."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from swiftbox.errors import Unsupported, UserError
from tests.conftest import ROOT
from tests.support.adapters import one_line_error, shared_adapter, shared_merged

os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
PROMPT = [{"role": "user", "content": "Is 4821 even?"}]


def quickstart_step(kind: str) -> dict:
    """The quickstart recipe's own settings for a step (the recipe is what users run)."""
    import yaml

    steps = yaml.safe_load((ROOT / "recipes" / "quickstart.yaml").read_text())["steps"]
    return next(step[kind] for step in steps if kind in step)


@pytest.fixture(scope="module")
def gptq4(tmp_path_factory):
    """adapter -> merge -> quantize with the quickstart's merge and quantize lines, as one recipe."""
    from swiftbox.runner import run_recipe

    root = tmp_path_factory.mktemp("q")
    recipe = {"name": "export", "model": str(shared_adapter("lora")), "output_dir": str(root),
              "steps": [{"merge": quickstart_step("merge")}, {"quantize": quickstart_step("quantize")}]}
    summary = run_recipe(recipe)
    merge, quantize = summary["steps"]
    assert merge["ok"] and quantize["ok"] and merge["metrics"]["max_abs_logit_diff"] <= 1e-4
    return root / "quantize", quantize["metrics"], root / "merge"


def _generate(model, tok):
    import torch

    batch = tok.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    new = out[0, batch["input_ids"].shape[1]:]
    assert new.numel() >= 1
    return new


def _logits(model, tok):
    import torch

    batch = tok.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        return model(**batch).logits[0].float()


def _round_trip(out, metrics, bits, min_cosine, source_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swiftbox.device import current_platform
    from swiftbox.modeling.loading import load_gptq_with_gptqmodel, transformers_loads_gptq

    assert metrics["bits"] == bits and metrics["size_bytes"] < metrics["source_size_bytes"]
    assert 0 < metrics["size_ratio"] < 0.6
    assert metrics["quantize_seconds"] > 0 and metrics["perplexity_ratio"] < 1.05
    assert metrics["cosine_mean"] >= min_cosine
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "gptq" and config["bits"] == bits
    assert json.loads((out / "generation_config.json").read_text())["do_sample"] is False
    manifest = json.loads((out / "swiftbox.json").read_text())
    assert manifest["artifact"] == "model" and manifest["quantization"]["bits"] == bits

    tok = AutoTokenizer.from_pretrained(out)
    source = AutoModelForCausalLM.from_pretrained(source_dir, dtype=torch.float32).eval()
    reference = _logits(source, tok)
    # 1) plain transformers (needs optimum + gptqmodel installed; without optimum it says so)
    if transformers_loads_gptq():
        model = AutoModelForCausalLM.from_pretrained(out, device_map="cpu", dtype=torch.bfloat16).eval()
        assert type(model.model.layers[0].mlp.down_proj) is not torch.nn.Linear  # a GPTQ kernel layer
        _generate(model, tok)
        cos = torch.nn.functional.cosine_similarity(_logits(model, tok), reference, dim=-1).mean().item()
        assert cos >= min_cosine
    else:
        with pytest.raises(ImportError, match="optimum"):
            AutoModelForCausalLM.from_pretrained(out, device_map="cpu")
    # 2) gptqmodel
    model = load_gptq_with_gptqmodel(out, current_platform("cpu"), "bfloat16").eval()
    assert type(model.model.layers[0].mlp.down_proj) is not torch.nn.Linear
    _generate(model, tok)
    cos = torch.nn.functional.cosine_similarity(_logits(model, tok), reference, dim=-1).mean().item()
    assert cos >= min_cosine


def test_gptq_4bit_round_trip(gptq4):
    out, metrics, merged = gptq4
    _round_trip(out, metrics, 4, 0.99, merged)
    manifest = json.loads((out / "swiftbox.json").read_text())
    assert manifest["quantization"]["calibration_source"] == "lineage"  # the adapter's training data
    assert manifest["quantization"]["calibration"][0].endswith("parity_sft.jsonl")
    assert metrics["calibration_samples"] == 128 and metrics["held_out_samples"] == 32
    assert list((out / "logs").glob("*.log")), "gptqmodel's per-layer log belongs in the output"
    assert not (ROOT / "logs").exists() or not any((ROOT / "logs").glob("gptq_log_*"))


@pytest.mark.slow
def test_gptq_8bit_round_trip(tmp_path):
    import swiftbox as sb

    out = tmp_path / "gptq8"
    entry = sb.quantize(str(shared_merged()), output=str(out), bits=8, samples=32, group_size=64)
    assert entry["metrics"]["group_size"] == 64
    _round_trip(out, entry["metrics"], 8, 0.999, shared_merged())


# -- refusals -------------------------------------------------------------------------------------------------

def test_refuses_an_adapter_and_says_merge_first(cli, tmp_path):
    adapter = shared_adapter("lora")
    res = cli("quantize", str(adapter), "--output", str(tmp_path / "q"))
    assert res.returncode == 2
    assert f"merge first: ./launch.sh merge {adapter}" in one_line_error(res)
    assert not (tmp_path / "q").exists()


def test_refuses_an_already_quantized_model(gptq4, tmp_path):
    import swiftbox as sb

    with pytest.raises(UserError, match="already gptq-quantized"):
        sb.quantize(str(gptq4[0]), output=str(tmp_path / "again"))
    assert not (tmp_path / "again").exists()


def test_refuses_missing_calibration_data(toy_dir, tmp_path, monkeypatch):
    """Calibration data is refused by the step's check: no <out>, no <out>.partial, the export never started."""
    import swiftbox as sb
    from swiftbox.device import current_platform
    from swiftbox.export import checkpoint
    from swiftbox.pipelines import load_pipeline
    from swiftbox.steps import QuantizeStep

    def reached(cfg, ctx):
        raise AssertionError("run reached: a calibration refusal belongs to check")

    monkeypatch.setattr(checkpoint, "run", reached)
    model = tmp_path / "model"          # the lineage names training data that is gone
    shutil.copytree(toy_dir, model)
    (model / "swiftbox.json").write_text(json.dumps({"artifact": "model", "datasets": [str(tmp_path / "gone.jsonl")]}))
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"unrelated": 1}\n')
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "one"}\n{"text": \n')
    cases = [(str(toy_dir), {"dataset": str(tmp_path / "nope.jsonl")}, "calibration file .*nope.jsonl not found"),
             (str(model), {}, "missing calibration data"),
             (str(toy_dir), {"dataset": str(empty)}, "no usable rows"),
             (str(toy_dir), {"dataset": str(broken)}, "broken.jsonl is not valid JSON")]
    for i, (ref, settings, refusal) in enumerate(cases):
        with pytest.raises(UserError, match=refusal):
            sb.quantize(ref, output=str(tmp_path / f"q{i}"), **settings)
        with pytest.raises(UserError, match=refusal):
            load_pipeline("quantize").check(QuantizeStep(**settings), current_platform("cpu"), ref)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("q")]


def test_refuses_existing_output_without_force(cli, toy_dir, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    res = cli("quantize", str(toy_dir), "--output", str(out))
    assert res.returncode == 2 and "--force" in one_line_error(res)
    assert (out / "keep.txt").read_text() == "mine"


def test_npu_refuses_gptq_with_exit_3_and_an_alternative(toy_dir, tmp_path):
    from swiftbox.device import NpuPlatform
    from swiftbox.pipelines import load_pipeline
    from swiftbox.steps import QuantizeStep

    with pytest.raises(Unsupported) as err:   # the pipeline's check: before any output directory exists
        load_pipeline("quantize").check(QuantizeStep(), NpuPlatform(), "toy")
    assert err.value.exit_code == 3 and "gptq" in str(err.value) and "instead" in str(err.value)


# -- calibration, group size, bnb -----------------------------------------------------------------------------

def test_calibration_sources(toy_dir, tmp_path):
    from swiftbox.artifacts import lineage
    from swiftbox.export.calibration import BUNDLED, calibration_files, split_held_out
    from swiftbox.steps import QuantizeStep

    assert calibration_files(QuantizeStep(), lineage(str(toy_dir))) == ([BUNDLED], "bundled")
    data = tmp_path / "calib.txt"
    data.write_text("one line\nanother line\n")
    assert calibration_files(QuantizeStep(dataset=f"{data}#1"), lineage(str(toy_dir))) == ([data], "dataset")
    trained = tmp_path / "trained"      # a model whose manifest names its training data: that calibrates
    trained.mkdir()
    (trained / "swiftbox.json").write_text(json.dumps({"artifact": "model", "datasets": [f"{data}#5"]}))
    assert calibration_files(QuantizeStep(), lineage(str(trained))) == ([data], "lineage")
    calib, held, disjoint = split_held_out([f"row {i}" for i in range(40)], samples=100)
    assert disjoint and len(held) == 5 and not set(calib) & set(held) and len(calib) == 35


def test_group_size_is_fitted_to_layer_widths(toy_dir):
    from swiftbox.export.calibration import fit_group_size, layer_widths

    assert layer_widths(toy_dir) == {128, 512}
    assert fit_group_size(128, {128, 256}) == (128, None)
    size, note = fit_group_size(128, {96, 192})
    assert size == 32 and "96" in note
    assert fit_group_size(128, {100})[0] == -1
    assert fit_group_size(-1, {100}) == (-1, None)


@pytest.mark.dtype
def test_bnb_load_configs(toy_dir):
    import torch

    from swiftbox.device import NpuPlatform, current_platform
    from swiftbox.modeling.loading import bnb_config, load_model, resolve_spec

    cpu = current_platform("cpu")
    four = bnb_config("bnb-4bit", cpu)    # computes in the platform's dtype (fp32, or bf16 on a bf16-native CPU)
    assert four.load_in_4bit and four.bnb_4bit_quant_type == "nf4"
    assert four.bnb_4bit_compute_dtype == getattr(torch, cpu.default_dtype())
    four = bnb_config("bnb-4bit", cpu, "float32")
    assert bnb_config("bnb-8bit", cpu).load_in_8bit
    with pytest.raises(UserError):
        bnb_config("bnb-3bit", cpu)
    with pytest.raises(Unsupported):
        bnb_config("bnb-4bit", NpuPlatform())
    model = load_model(resolve_spec(str(toy_dir)), cpu, "float32", quantization_config=four)
    assert "4bit" in type(model.model.layers[0].mlp.down_proj).__name__
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=torch.tensor([[5, 6, 7]])).logits).all()


def test_swiftbox_loader_falls_back_to_gptqmodel_without_optimum(gptq4, monkeypatch):
    import torch

    from swiftbox.device import current_platform
    from swiftbox.modeling import loading

    monkeypatch.setattr(loading, "transformers_loads_gptq", lambda: False)
    spec = loading.resolve_spec(str(gptq4[0]))
    assert spec.quantized == "gptq"
    model = loading.load_model(spec, current_platform("cpu"), "float32")  # float32 asked, 16-bit kernels used
    assert model.dtype == torch.bfloat16 and type(model.model.layers[0].mlp.down_proj) is not torch.nn.Linear
    _generate(model, loading.load_tokenizer(spec))


# -- AWQ, bitsandbytes, FP8, GGUF and the quality gate ------------------------------------------------------

PARITY_EVAL = str(ROOT / "recipes" / "data" / "parity_eval.jsonl")
# The 1.1M-parameter toy loses a quarter of its perplexity at 4 bits with AWQ and NF4 (measured on held-out parity
# rows, source and export in the same dtype: AWQ x1.218 (32 samples) in bf16 on AVX512-BF16, x1.275 reported on an AMX
# Xeon; NF4 x1.178 in fp32, x1.256 in bf16) - at the documented 1.25 for real models (GPTQ on SmolLM2-135M: x1.047).
# These tests prove the formats, so they allow the toy's loss with a margin; the gate itself is tested below.
TOY_4BIT = {"max_perplexity_ratio": 1.4}


def _loads_quantized(out, layer_type_name: str):
    """Plain transformers loads the export quantized (no flags) and it generates."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out, device_map="cpu").eval()
    layer = model.model.layers[0].mlp.down_proj
    assert type(layer) is not torch.nn.Linear and layer_type_name in type(layer).__name__
    _generate(model, AutoTokenizer.from_pretrained(out))


def _reported(metrics: dict):
    for key in ("size_ratio", "quantize_seconds", "perplexity_before", "perplexity_after", "cosine_mean",
                "argmax_agreement"):
        assert isinstance(metrics[key], float), key
    assert metrics["quantized_modules"] == metrics["linear_modules"] > 0
    assert 0 < metrics["size_ratio"] < 1


def test_awq_export_loads_with_from_pretrained_and_reports_accuracy(tmp_path):
    import swiftbox as sb

    out = tmp_path / "awq"
    entry = sb.quantize(str(shared_merged()), output=str(out), method="awq", samples=32, eval_dataset=PARITY_EVAL,
                        tolerance=TOY_4BIT)
    metrics = entry["metrics"]
    _reported(metrics)
    assert metrics["method"] == "awq" and metrics["bits"] == 4
    assert metrics["accuracy_drop"] == pytest.approx(metrics["accuracy_before"] - metrics["accuracy_after"])
    assert metrics["accuracy_drop"] <= 0.05  # the documented tolerance the step enforces
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "awq" and config["bits"] == 4
    assert json.loads((out / "generation_config.json").read_text()).get("do_sample") is not True
    _loads_quantized(out, "Awq")


@pytest.mark.parametrize("bits,layer", [pytest.param(4, "Linear4bit", marks=pytest.mark.dtype),
                                        pytest.param(8, "Linear8bitLt", marks=pytest.mark.slow)])
def test_bnb_export_is_saved_so_plain_from_pretrained_loads_it(tmp_path, bits, layer):
    import swiftbox as sb

    out = tmp_path / f"bnb{bits}"
    metrics = sb.quantize(str(shared_merged()), output=str(out), method="bnb", bits=bits,
                          **({"tolerance": TOY_4BIT} if bits == 4 else {}))["metrics"]
    _reported(metrics)
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "bitsandbytes" and config[f"load_in_{bits}bit"] is True
    manifest = json.loads((out / "swiftbox.json").read_text())
    assert manifest["quantization"]["tolerances"]["min_cosine"] == (0.95 if bits == 4 else 0.99)
    # like with like: the gate measured the source in the dtype the export computes in (the platform's, for bnb)
    assert manifest["dtype"] == manifest["dtype_plan"]["check"] == manifest["quantization"]["compute_dtype"]
    _loads_quantized(out, layer)


def test_a_silently_unquantized_export_fails_the_gate(tmp_path, monkeypatch, cli):
    """A writer that saves full precision (ms-swift #9830) must not pass: exit 1, nothing written."""
    import swiftbox as sb
    from swiftbox.export.quality import QualityGateFailed
    from swiftbox.export.writers import transformers as transformers_writer

    monkeypatch.setattr(transformers_writer, "quantization_config", lambda *a, **k: None)
    with pytest.raises(QualityGateFailed, match="linear layers are not stored quantized") as err:
        sb.quantize(str(shared_merged()), output=str(tmp_path / "plain"), method="bnb", bits=8)
    assert err.value.exit_code == 1
    assert not (tmp_path / "plain").exists()


def test_tolerances_are_nan_safe():
    from swiftbox.export import quality

    tol = quality.tolerances(4, {"min_cosine": None})
    inspection = {"quantized_modules": 14, "linear_modules": 14, "unquantized": [], "error": None}
    good = {"size_ratio": 0.3, "perplexity_ratio": 1.0, "cosine_mean": 0.99, "argmax_agreement": 0.95}
    assert quality.gate(good, inspection, tol) == []
    for key in good:
        broken = quality.gate({**good, key: float("nan")}, inspection, tol)
        assert len(broken) == 1 and broken[0].startswith(key)
    assert quality.gate({**good, "cosine_mean": 0.5}, inspection, quality.tolerances(4, {"min_cosine": 0.4})) == []


def test_fp8_is_refused_with_exit_3_and_an_alternative(cli, toy_dir, tmp_path):
    res = cli("quantize", str(toy_dir), "--method", "fp8", "--output", str(tmp_path / "f"), "--device", "cpu")
    assert res.returncode == 3 and "FP8" in one_line_error(res) and "instead" in one_line_error(res)
    assert not (tmp_path / "f").exists()
    res = cli("quantize", str(toy_dir), "--method", "awq", "--bits", "8", "--output", str(tmp_path / "a"))
    assert res.returncode == 2 and "8 is not available with method awq" in one_line_error(res)


def test_fp8_capability_follows_the_gpu_generation(monkeypatch):
    from swiftbox.device import CudaPlatform, NpuPlatform, current_platform

    cuda = CudaPlatform()
    monkeypatch.setattr(CudaPlatform, "device_name", lambda self, i=0: "GPU")
    monkeypatch.setattr(CudaPlatform, "compute_capability", lambda self, i=0: (8, 0))
    assert "8.0" in cuda.why_not("fp8").why
    monkeypatch.setattr(CudaPlatform, "compute_capability", lambda self, i=0: (9, 0))
    assert cuda.supports("fp8")
    assert not current_platform("cpu").supports("fp8") and not NpuPlatform().supports("fp8")


def test_a_kernel_refusing_a_layer_shape_falls_back_to_the_torch_kernel(gptq4, monkeypatch):
    """On Hopper, gptqmodel auto-selects Machete, which refuses the toy's 64-wide k/v projections at load
    (seen on an H100): the loader then asks for gptqmodel's torch kernel, which takes any shape."""
    from transformers import AutoModelForCausalLM

    from swiftbox.device import current_platform
    from swiftbox.modeling import loading

    real, asked = AutoModelForCausalLM.from_pretrained, []

    def refuse_auto_kernel(path, **kwargs):
        asked.append(kwargs.get("quantization_config"))
        if asked[-1] is None:
            raise NotImplementedError("MacheteLinear: `out_features`: 64 must be divisible by [128].")
        return real(path, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse_auto_kernel)
    spec = loading.resolve_spec(str(gptq4[0]))
    model = loading.load_model(spec, current_platform("cpu"), "float32")
    assert asked[0] is None and asked[1].backend == "gptq_torch" and asked[1].bits == 4
    assert "Torch" in type(model.model.layers[0].self_attn.k_proj).__name__
    _generate(model, loading.load_tokenizer(spec))

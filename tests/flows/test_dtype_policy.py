"""The one dtype policy (swiftbox/device/dtype_policy.py): what each step computes, saves and checks in, per device;
every "same model?" check compares like with like, so a correct chain passes whether the CPU computes in fp32 or
bf16 (SWIFTBOX_CPU_BF16=off|on - `./launch.sh test` runs the `dtype` tests under both) and whether the source model
is stored in fp32 or bf16, while one planted fault (one Linear's weights perturbed) still fails."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from swiftbox.device import dtype_policy as policy
from swiftbox.errors import SwiftboxError
from tests.support.adapters import make_adapter, shared_adapter, shared_merged

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL, LARGE = 0.05, 0.5     # planted faults: noise of this many weight-stds in ONE Linear of the merged model


class FakePlatform:
    """Just what the policy asks of a platform: its default dtype and whether bf16 works."""

    def __init__(self, default: str, bf16: bool = True):
        self.default, self.bf16 = default, bf16

    def bf16_supported(self) -> bool:
        return self.bf16

    def resolve_dtype(self, requested):
        return self.default if requested in (None, "", "auto") else requested


@pytest.mark.parametrize(("device", "default", "kernel"), [
    (FakePlatform("float32"), "float32", "bfloat16"),            # a CPU without native bf16 (SWIFTBOX_CPU_BF16=off)
    (FakePlatform("bfloat16"), "bfloat16", "bfloat16"),          # AMX / AVX512_BF16 / Arm BF16 (=on), Ampere+, 910B
    (FakePlatform("float16", bf16=False), "float16", "float16"),  # pre-Ampere GPU, Ascend 910A / 310P
])
def test_each_step_asks_the_one_policy(device, default, kernel):
    lora = policy.training(device, "auto", full=False)
    assert (lora.compute, lora.save, lora.check) == (default, "float32", None)
    assert policy.training(device, "auto", full=True).save == default
    merge = policy.merge(device, "auto", "bfloat16")
    assert (merge.compute, merge.save, merge.check, merge.tolerance) == ("float32", "bfloat16", "float32", 1e-4)
    assert policy.merge(device, "float16", "bfloat16").save == "float16"       # dtype: chooses the save dtype only
    gptq = policy.quantize(device, "auto", sixteen_bit=True)
    assert gptq.compute == gptq.check == kernel                                # source measured in the export's dtype
    assert policy.quantize(device, "auto", sixteen_bit=False).check == default  # bnb computes in the platform's
    assert policy.same_model_check(device, "auto") == "float32"
    assert policy.same_model_check(device, "auto", (None, "gptq")) == kernel
    assert policy.same_model_check(device, "bfloat16") == "bfloat16"
    assert "compute float32, save bfloat16, check float32" in merge.describe()
    rows = {r["step"]: r for r in policy.policy_rows(device)}
    assert rows["eval / serve / chat"]["compute"] == default and rows["merge"]["check"] == "float32"


def test_tolerances_scale_with_dtype_and_logit_magnitude(tmp_path):
    assert policy.relative_tolerance("float32") == 1e-4 and policy.relative_tolerance("bfloat16") == 5e-2
    assert policy.logit_tolerance("float32", 0.3) == 1e-4                      # small logits: an absolute floor
    assert policy.logit_tolerance("bfloat16", 20.0) == pytest.approx(1.0)
    assert policy.least_precise("float32", "bfloat16", None) == "bfloat16"
    assert policy.least_precise(None) == "float32"
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "bfloat16"}))
    assert policy.source_dtype(tmp_path) == "bfloat16"
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "float16"}))
    assert policy.source_dtype(tmp_path) == "float16" and policy.source_dtype(tmp_path / "missing") == "float32"


# -- planted faults -----------------------------------------------------------------------------------------------

def perturb(model, scale: float) -> str:
    """Add noise of `scale` weight-stds to one Linear in the middle of the decoder; returns its name."""
    import torch

    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in n]
    name = names[len(names) // 2]
    weight = model.get_submodule(name).weight
    with torch.no_grad():
        noise = torch.randn(weight.shape, generator=torch.Generator().manual_seed(0))
        weight += (noise * weight.float().std() * scale).to(weight.dtype)
    return name


def planted_copy(src: Path, out: Path, scale: float) -> Path:
    """A copy of the model directory `src` with one Linear perturbed, saved in the dtype it was stored in."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(src, out)
    dtype = getattr(torch, policy.source_dtype(src))
    model = AutoModelForCausalLM.from_pretrained(src, dtype=dtype)
    perturb(model, scale)
    model.save_pretrained(out)
    return out


@pytest.fixture
def faulty_merge(monkeypatch):
    """PEFT's merge_and_unload, with one Linear of its result perturbed (set `.scale` before merging)."""
    from peft.tuners.lora import LoraModel

    original = LoraModel.merge_and_unload
    state = {"scale": SMALL}

    def merge_and_unload(self, *args, **kwargs):
        model = original(self, *args, **kwargs)
        perturb(model, state["scale"])
        return model

    monkeypatch.setattr(LoraModel, "merge_and_unload", merge_and_unload)
    return state


@pytest.fixture(scope="module")
def bf16_source(tmp_path_factory, toy_dir):
    """toy stored in bf16 (as most released models are) and a LoRA adapter trained on it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("bf16src")
    base = root / "toy-bf16"
    AutoModelForCausalLM.from_pretrained(toy_dir, dtype=torch.bfloat16).save_pretrained(base)
    AutoTokenizer.from_pretrained(toy_dir).save_pretrained(base)
    assert policy.source_dtype(base) == "bfloat16"
    return base, make_adapter(base, root / "adapter", seed=5)


@pytest.mark.dtype
def test_merge_is_exact_in_any_cpu_kind_and_a_planted_fault_fails(tmp_path, faulty_merge):
    """fp32 compute and check whatever the CPU trains in: a correct merge is exact (1e-4), and one perturbed Linear -
    even a small perturbation - fails it, nothing written."""
    import swiftbox as sb

    out = tmp_path / "merged"
    faulty_merge["scale"] = 0.0
    entry = sb.merge(str(shared_adapter("lora")), output=str(out))
    manifest = json.loads((out / "swiftbox.json").read_text())
    assert entry["metrics"]["relative_logit_diff"] <= 1e-4 and entry["metrics"]["save_rounding_max_abs"] == 0.0
    assert manifest["dtype_plan"] == {"compute": "float32", "save": "float32", "check": "float32", "tolerance": 1e-4}
    assert manifest["dtype"] == "float32" and manifest["compute_dtype"] == "float32"
    for scale in (SMALL, LARGE):
        faulty_merge["scale"] = scale
        with pytest.raises(SwiftboxError, match="verification failed.*float32"):
            sb.merge(str(shared_adapter("lora")), output=str(tmp_path / f"bad{scale}"))
        assert not (tmp_path / f"bad{scale}").exists()


@pytest.mark.dtype
def test_an_adapter_trained_in_the_platform_dtype_merges_exactly(tmp_path, capsys):
    """The user's path on a bf16-native CPU: SFT computes in the platform's dtype (bf16 with SWIFTBOX_CPU_BF16=on),
    the merge after it still computes and checks in fp32 (it used to follow the adapter into bf16 and refuse a correct
    merge), and the step headers say so."""
    from swiftbox.device import current_platform
    from swiftbox.runner import run_recipe
    from tests.support.adapters import PARITY_SFT

    summary = run_recipe({"name": "r", "model": "toy", "steps": [
        {"sft": {"dataset": PARITY_SFT + "#32", "max_steps": 2, "batch_size": 8, "save_steps": 100}},
        {"merge": {}}]}, runs_root=tmp_path)
    sft, merge = summary["steps"]
    trained = current_platform().default_dtype()
    assert json.loads((tmp_path / "r" / "sft" / "swiftbox.json").read_text())["dtype"] == trained
    assert merge["metrics"]["relative_logit_diff"] <= 1e-4
    err = capsys.readouterr().err
    assert f"sft <- toy  (device cpu; compute {trained}, save float32; adapter weights)" in err
    assert "merge <- " in err and "compute float32, save float32, check float32" in err


@pytest.mark.dtype
def test_a_bf16_source_merges_in_fp32_saves_bf16_and_verifies(bf16_source, tmp_path, faulty_merge):
    """A bf16 source is merged and checked in fp32 and saved in bf16: the file is checked against the merged weights
    rounded to bf16 (exact), the rounding is reported; verify's merge link models the rounding the same way, so it
    passes - and fails on one perturbed Linear in the saved model."""
    import torch
    from safetensors.torch import load_file

    import swiftbox as sb
    from swiftbox.verify import verify

    base, adapter = bf16_source
    out = tmp_path / "merged"
    faulty_merge["scale"] = 0.0
    metrics = sb.merge(str(adapter), output=str(out))["metrics"]
    assert {t.dtype for t in load_file(out / "model.safetensors").values()} == {torch.bfloat16}
    assert metrics["relative_logit_diff"] <= 1e-4                      # exact: like with like
    assert 0 < metrics["save_rounding_relative"] < 5e-2                # bf16 storage costs something, reported
    report = verify(str(out), serve=False)
    assert report.ok, [c.line() for c in report.failures]
    link = next(c for c in report.checks if c.name == "base+adapter -> merged")
    assert "both in float32" in link.detail and "rounded to bfloat16" in link.detail
    bad = planted_copy(out, tmp_path / "planted", SMALL)
    link = next(c for c in verify(str(bad), serve=False).checks if c.name == "base+adapter -> merged")
    assert link.failed and "relative_diff" in link.detail
    faulty_merge["scale"] = SMALL
    with pytest.raises(SwiftboxError, match="verification failed"):
        sb.merge(str(adapter), output=str(tmp_path / "bad"))


@pytest.mark.dtype
def test_verify_merge_link_passes_and_a_planted_fault_fails(tmp_path):
    from swiftbox.verify import verify

    report = verify(str(shared_merged()), serve=False)
    assert report.ok, [c.line() for c in report.failures]
    link = next(c for c in report.checks if c.name == "base+adapter -> merged")
    assert "both in float32" in link.detail
    bad = planted_copy(shared_merged(), tmp_path / "planted", SMALL)
    link = next(c for c in verify(str(bad), serve=False).checks if c.name == "base+adapter -> merged")
    assert link.failed and "relative_diff" in link.detail and "(needs <= 0.0001)" in link.detail


@pytest.mark.dtype
@pytest.mark.parametrize("dtype", ["auto", "bfloat16"])
def test_parity_is_like_with_like_and_catches_a_planted_fault(tmp_path, dtype):
    """auto: both sides in fp32 on every CPU (exact); bfloat16 asked: both in bf16, the tolerance scaled for it -
    the correct merge still passes, one Linear perturbed by half its std still fails."""
    import swiftbox as sb

    same = sb.parity(str(shared_adapter("lora")), str(shared_merged()), dtype=dtype)
    assert same["dtype"] == ("float32" if dtype == "auto" else "bfloat16")
    assert same["same_model"] and same["tolerance"] == policy.relative_tolerance(same["dtype"])
    bad = planted_copy(shared_merged(), tmp_path / "planted", LARGE)
    apart = sb.parity(str(shared_adapter("lora")), str(bad), dtype=dtype)
    assert not apart["same_model"] and apart["relative_diff"] > apart["tolerance"]
    if dtype == "auto":   # ./launch.sh parity --same-model: exit 1 on the fault, 0 on the correct merge
        from swiftbox.parity import parity_cli

        assert parity_cli(str(shared_adapter("lora")), str(bad), ["--same-model", "--json"]) == 1
        assert parity_cli(str(shared_adapter("lora")), str(shared_merged()), ["--same-model", "--json"]) == 0


# -- chat one-shots follow the model's generation config ------------------------------------------------------------

def test_chat_samples_as_the_generation_config_says_and_is_greedy_without_one(tmp_path, toy_dir):
    import shutil

    from swiftbox.pipelines.chat import request_sampling, sampling_defaults
    from swiftbox.steps import ChatStep

    model = tmp_path / "m"
    shutil.copytree(toy_dir, model)
    assert sampling_defaults(str(model)) == {"temperature": 0.0}             # toy's config: do_sample false
    (model / "generation_config.json").unlink()
    assert sampling_defaults(str(model)) == {"temperature": 0.0}             # no config: greedy
    (model / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}))
    sampled = sampling_defaults(str(model))
    assert sampled == {"temperature": 0.7, "top_p": 0.8, "extra_body": {"top_k": 20, "repetition_penalty": 1.05}}
    assert request_sampling(ChatStep(prompt="hi"), sampled) == sampled
    assert request_sampling(ChatStep(prompt="hi", temperature=1.2), sampled) == {"temperature": 1.2}
    assert request_sampling(ChatStep(prompt="hi"), None) == {"temperature": 0.0}   # --url: greedy unless asked


def test_chat_one_shot_is_greedy_by_default(cli, tmp_path):
    out = cli("chat", "toy", "--prompt", "Is 4 even?", "--max-tokens", "4", "--output", str(tmp_path / "c"))
    assert out.returncode == 0, out.stderr[-2000:]
    metrics = json.loads(out.stdout.strip().splitlines()[-1])["metrics"]
    assert metrics["temperature"] == 0.0 and metrics["ok"]


# -- ./launch.sh test runs the dtype tests again as on a bf16-native CPU ---------------------------------------------

@pytest.mark.parametrize(("env", "flags", "first_rc", "passes"), [
    ("auto", [], 0, ["off-default", "on"]), ("off", [], 0, ["off-default", "on"]), ("on", [], 0, ["on"]),
    ("auto", ["--no-bf16-pass"], 0, ["off-default"]), ("auto", [], 1, ["off-default"]),
    ("auto", ["--slow"], 0, ["off-default"]),
])
def test_launch_test_runs_a_bf16_pass_of_the_dtype_tests(monkeypatch, no_vllm_cpu, env, flags, first_rc, passes):
    import subprocess

    from swiftbox import cli

    calls = []

    def call(cmd, cwd=None, env=None):
        calls.append((cmd, env.get("SWIFTBOX_CPU_BF16")))
        return first_rc if len(calls) == 1 else 0

    monkeypatch.setattr(subprocess, "call", call)
    monkeypatch.setenv("SWIFTBOX_CPU_BF16", env)
    args = cli.build_parser().parse_args(["test", "--no-lint", *flags, "tests/flows/test_merge.py"])
    assert cli.run_tests(args) == first_rc
    assert [("on" if mode == "on" else "off-default") for _, mode in calls] == passes
    if len(calls) == 2:
        cmd = calls[1][0]
        assert cmd[cmd.index("-m", 2) + 1] == "dtype and (not slow and not cuda and not npu and not vllm)"
        assert cmd[-1] == "tests/flows/test_merge.py"

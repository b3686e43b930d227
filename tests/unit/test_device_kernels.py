"""Training-speed hooks of the platforms, by simulation (no GPU or NPU here): the batching default, the attention
kernel for packed batches, and the fused kernels (Liger) put into the trainer's arguments where installed."""
from __future__ import annotations

import importlib.util
import types
from dataclasses import fields

import pytest

from swiftbox.device import cuda as cuda_module
from swiftbox.device.cpu import CpuPlatform
from swiftbox.device.cuda import CudaPlatform
from swiftbox.device.npu import NpuPlatform
from swiftbox.steps import DpoStep, SftStep
from swiftbox.training.arguments import batching, common_args


def installed(*names):
    return lambda pkg: pkg in names


def test_cpu_uses_sdpa_and_no_extra_kernels():
    cpu = CpuPlatform()
    assert cpu.attn_implementation(False) == "sdpa"
    assert cpu.attn_implementation(True) == "sdpa_varlen"      # packed rows attend per sample by default
    assert cpu.training_kernels() == {}


def test_cpu_dense_mask_on_request(monkeypatch):
    monkeypatch.setenv("SWIFTBOX_CPU_ATTENTION", "sdpa")
    assert CpuPlatform().attn_implementation(True) == "sdpa"


def test_cuda_liger_and_varlen_flash_attention_only_when_installed(monkeypatch):
    cuda = CudaPlatform()
    monkeypatch.setattr(cuda_module, "_importable", installed())
    assert cuda.training_kernels() == {}
    # without flash-attn packed rows attend per sample through SDPA (device/attention.py), never over a dense mask
    assert cuda.attn_implementation(True) == "sdpa_varlen" and cuda.attn_implementation(False) == "sdpa"
    from transformers import AttentionInterface

    assert "sdpa_varlen" in AttentionInterface._global_mapping       # registered for transformers to find
    monkeypatch.setattr(cuda_module, "_importable", installed("liger_kernel", "flash_attn"))
    kernels = cuda.training_kernels()
    assert kernels["use_liger_kernel"] is True
    # TRL's trainers refuse Liger's fused linear cross-entropy (they fuse the LM head themselves)
    assert kernels["liger_kernel_config"]["fused_linear_cross_entropy"] is False
    assert kernels["liger_kernel_config"]["rms_norm"] and kernels["liger_kernel_config"]["swiglu"]
    assert cuda.attn_implementation(True) == "flash_attention_2"      # varlen over the packed row
    assert cuda.attn_implementation(False) == "sdpa"                  # padded batches: SDPA is as good


def test_liger_settings_are_trainer_arguments():
    from transformers import TrainingArguments

    names = {f.name for f in fields(TrainingArguments)}
    assert {"use_liger_kernel", "liger_kernel_config"} <= names
    from transformers.integrations import liger as integration  # what Trainer calls with our config

    assert callable(integration.apply_liger_kernel)


def test_npu_packed_batches_use_npu_fusion_attention():
    npu = NpuPlatform()
    assert npu.attn_implementation(True) == "flash_attention_2"
    assert npu.attn_implementation(False) == "sdpa"
    # transformers routes flash_attention_2 on Ascend to torch_npu.npu_fusion_attention (varlen "TND" layout)
    spec = importlib.util.find_spec("transformers.integrations.npu_flash_attention")
    assert spec is not None
    source = open(spec.origin).read()
    assert "npu_fusion_attention" in source and '"TND"' in source


@pytest.mark.parametrize("settings, platform_choice, expected", [
    ({}, "packing", (True, False)),
    ({}, "grouped", (False, True)),
    ({"packing": False}, "packing", (False, True)),          # padding: grouping pays, on unless told
    ({"packing": False, "group_by_length": False}, "packing", (False, False)),
    ({"packing": True, "group_by_length": True}, "grouped", (True, True)),
])
def test_batching_default_comes_from_the_platform(settings, platform_choice, expected):
    platform = types.SimpleNamespace(sft_batching=lambda: platform_choice)
    assert batching(SftStep(dataset="x", **settings), platform) == expected


def test_dpo_batches_are_padded():
    assert batching(DpoStep(dataset="x"), CpuPlatform()) == (False, False)


def test_common_args_carry_the_platforms_kernels(monkeypatch, tmp_path):
    monkeypatch.setattr(cuda_module, "_importable", installed("liger_kernel"))
    ctx = types.SimpleNamespace(platform=CudaPlatform())
    monkeypatch.setattr("swiftbox.training.arguments.training_arguments_extra", lambda cfg, platform: {})
    args = common_args(SftStep(dataset="x"), ctx, "bfloat16", tmp_path)
    assert args["use_liger_kernel"] is True and args["bf16"] is True
    cpu_args = common_args(SftStep(dataset="x"), types.SimpleNamespace(platform=CpuPlatform()), "float32", tmp_path)
    assert "use_liger_kernel" not in cpu_args


def test_training_model_is_loaded_with_the_platforms_attention(tmp_path):
    from swiftbox.training.model import load_for_training

    tm = load_for_training("toy", SftStep(dataset="x", max_steps=1), CpuPlatform(), "float32")
    assert tm.model.config._attn_implementation == "sdpa_varlen"   # the step packs by default on the CPU

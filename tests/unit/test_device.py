"""Device layer with injected detectors: resolution order, overrides, capabilities, child env."""
from __future__ import annotations

import pytest

from swiftbox.device import CpuPlatform, CudaPlatform, Devices, NpuPlatform, detect, parse_devices, resolve_platform
from swiftbox.device.npu import soc_supports_bf16
from swiftbox.errors import Unsupported, UserError

ALL = {"npu": lambda: True, "cuda": lambda: True}
NONE = {"npu": lambda: False, "cuda": lambda: False}


def test_detection_order_prefers_npu_over_cuda():
    # transfer_to_npu-patched environments report CUDA too: NPU must win
    assert detect(ALL) == ["npu", "cuda", "cpu"]
    assert isinstance(resolve_platform("auto", ALL), NpuPlatform)
    assert isinstance(resolve_platform("auto", {"npu": lambda: False, "cuda": lambda: True}), CudaPlatform)
    assert isinstance(resolve_platform("auto", NONE), CpuPlatform)


def test_detector_that_raises_counts_as_absent():
    def boom():
        raise RuntimeError("driver exploded")

    assert detect({"npu": boom, "cuda": boom}) == ["cpu"]


def test_env_override_wins(monkeypatch):
    monkeypatch.setenv("SWIFTBOX_DEVICE", "cuda")
    assert isinstance(resolve_platform(None, ALL), CudaPlatform)
    monkeypatch.setenv("SWIFTBOX_DEVICE", "cpu")
    assert isinstance(resolve_platform(None, ALL), CpuPlatform)


def test_requesting_a_missing_device_is_exit_3_naming_what_is_there():
    with pytest.raises(Unsupported) as err:
        resolve_platform("npu", NONE)
    assert err.value.exit_code == 3
    assert "available: cpu" in str(err.value)


def test_unknown_device_is_bad_input():
    with pytest.raises(UserError):
        resolve_platform("tpu", NONE)


@pytest.mark.parametrize("soc,bf16", [("Ascend910B2", True), ("Ascend910B4", True), ("Ascend910_9392", True),
                                      ("Ascend910A", False), ("Ascend910ProA", False), ("Ascend310P3", False)])
def test_npu_bf16_only_on_910b_and_newer(soc, bf16, monkeypatch):
    assert soc_supports_bf16(soc) is bf16
    monkeypatch.setattr(NpuPlatform, "device_name", lambda self, i=0: soc)
    assert NpuPlatform().default_dtype() == ("bfloat16" if bf16 else "float16")


def test_npu_facts_and_child_env(monkeypatch):
    p = NpuPlatform()
    assert (p.dist_backend, p.visible_devices_env) == ("hccl", "ASCEND_RT_VISIBLE_DEVICES")
    env = p.env_for("0,1,2,3")
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3"
    assert env["HCCL_CONNECT_TIMEOUT"] and env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert env["SWIFTBOX_DEVICE"] == "npu"
    assert CudaPlatform().env_for(2)["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert CudaPlatform().dist_backend == "nccl" and CpuPlatform().dist_backend == "gloo"
    assert "CUDA_VISIBLE_DEVICES" not in CpuPlatform().env_for("0,1")


def test_capability_refusals_name_an_alternative(monkeypatch):
    monkeypatch.setattr(NpuPlatform, "device_name", lambda self, i=0: "Ascend910B2")
    npu = NpuPlatform()
    for feature in ("qlora-bnb", "gptq"):
        assert not npu.supports(feature)
        with pytest.raises(Unsupported) as err:
            npu.require(feature)
        assert "instead" in str(err.value) and "npu" in str(err.value)
    assert "lora" in str(npu.why_not("qlora-bnb").instead)
    cpu = CpuPlatform()
    assert not cpu.supports("vllm-colocate") and "generate" in cpu.why_not("vllm-colocate").instead
    with pytest.raises(ValueError):
        cpu.supports("warp-drive")


def test_cpu_defaults(monkeypatch):
    from swiftbox.device import cpu as cpu_module

    monkeypatch.setattr(cpu_module, "native_bf16_flags", lambda flags=None: [])
    monkeypatch.setenv("SWIFTBOX_CPU_BF16", "auto")
    cpu = CpuPlatform()
    assert cpu.default_dtype() == "float32"
    assert cpu.training_args("float32")["use_cpu"] is True
    assert cpu.resolve_dtype("auto") == "float32" and cpu.resolve_dtype("bfloat16") == "bfloat16"
    assert str(cpu.torch_device()) == "cpu"


def test_devices_has_one_meaning():
    """A number is a count, a list or comma form is ids; the same parse for every step and the header."""
    assert parse_devices(2) == Devices(count=2) and parse_devices(2).resolve() == [0, 1]
    assert parse_devices("0,1,3") == Devices(ids=(0, 1, 3)) and parse_devices("0,1,3").n == 3
    assert parse_devices([2]) == parse_devices("2,") == Devices(ids=(2,))
    assert parse_devices([2]).resolve() == [2] and parse_devices([2]).n == 1
    assert parse_devices(None) is None and parse_devices("auto") is None
    assert parse_devices(2).spelling() == 2 and parse_devices([2]).spelling() == "2,"
    assert str(parse_devices("0,1")) == "0,1"
    for bad, why in [("2", "ambiguous"), (0, "at least 1"), ("0,0", "repeat"), ("a,b", "count"), (True, "count"),
                     ([-1], "ids")]:
        with pytest.raises(ValueError, match=why):
            parse_devices(bad)


@pytest.mark.parametrize("kind", ["sft", "dpo", "serve"])
def test_train_and_serve_read_devices_alike(kind):
    """The same spelling is the same devices on every step (serve's tensor parallel = the number of them)."""
    from swiftbox.errors import UserError
    from swiftbox.recipe import parse_step

    base = {"dataset": "d.jsonl"} if kind != "serve" else {}
    assert parse_step({kind: {**base, "devices": 2}}, 0).config.devices == Devices(count=2)
    assert parse_step({kind: {**base, "devices": "0,1"}}, 0).config.devices == Devices(ids=(0, 1))
    assert parse_step({kind: {**base, "devices": [3]}}, 0).config.devices == Devices(ids=(3,))
    with pytest.raises(UserError, match="ambiguous") as err:
        parse_step({kind: {**base, "devices": "3"}}, 0)
    assert err.value.exit_code == 2


def test_vllm_tensor_parallel_follows_devices():
    from swiftbox.device import CudaPlatform
    from swiftbox.serving.vllm.plan import plan
    from swiftbox.steps import ServeStep

    for devices, tp, visible in [(2, "2", "0,1"), ("1,3", "2", "1,3"), ([3], "1", "3")]:
        p = plan(ServeStep(devices=devices), CudaPlatform(), model_path="m", base_name="m", loras={},
                 dtype="bfloat16", port=1, executable=["vllm"])
        assert p.argv[p.argv.index("--tensor-parallel-size") + 1] == tp
        assert p.env["CUDA_VISIBLE_DEVICES"] == visible


AMD_EPYC_AVX2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n"
SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd bf16 sve\n"


def test_native_bf16_is_read_from_cpu_flags(monkeypatch):
    """bf16 becomes the CPU default only with a native bf16 matmul unit (AMX / AVX512-BF16)."""
    from swiftbox.device import cpu as cpu_module

    monkeypatch.setenv("SWIFTBOX_CPU_BF16", "auto")

    assert cpu_module.native_bf16_flags(cpu_module.cpu_flags(AMD_EPYC_AVX2)) == []
    assert cpu_module.native_bf16_flags(cpu_module.cpu_flags(SAPPHIRE_RAPIDS)) == ["amx_bf16", "avx512_bf16"]
    assert cpu_module.native_bf16_flags(cpu_module.cpu_flags(GRAVITON3)) == ["bf16"]    # Arm v8.6 BF16
    assert cpu_module.cpu_flags("no flags line") == set()
    real = cpu_module.cpu_flags
    for text, dtype in ((AMD_EPYC_AVX2, "float32"), (SAPPHIRE_RAPIDS, "bfloat16")):
        monkeypatch.setattr(cpu_module, "cpu_flags", lambda cpuinfo=None, t=text: real(t))
        assert CpuPlatform().default_dtype() == dtype
        assert CpuPlatform().training_args(dtype)["bf16"] is (dtype == "bfloat16")

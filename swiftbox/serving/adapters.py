"""Runtime LoRA adapters: the policy behind `POST /v1/load_lora_adapter {lora_name, lora_path}` and
`POST /v1/unload_lora_adapter {lora_name}` (the routes: routes/adapters.py, in vLLM's shape).

The checks are the same for both engines and run before any engine sees the path (`AdapterPolicy.inspect`):
- the path, after resolving symlinks and `..`, lies under one of the allowed roots (`--adapter-root`, default
  the runs directory), and so does every file PEFT will read from it (a symlinked weight file cannot escape);
- it is a PEFT LoRA directory with safetensors weights (no pickled `.bin`);
- it was trained on the base model this server serves (its manifest / adapter_config name that base);
- the engine can serve it: the built-in engine mixes adapters per row, which PEFT does not do for DoRA; vLLM
  has its limits (fit.py) and the `max_lora_rank` it was started with.
Then the engine loads it: the built-in engine between two steps on its own thread (adapter_slots.py), vLLM
through its runtime LoRA updating mode (vllm/child.py). A refusal is a 4xx with the reason; the server
goes on serving.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from swiftbox.serving import fit
from swiftbox.serving.errors import ApiError

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"


def refused(status: int, message: str, code: str, param: str = "lora_path") -> ApiError:
    return ApiError(status, message, param=param, code=code)


@dataclass
class AdapterPolicy:
    """What this server lets clients load at run time."""

    engine: str                          # builtin | vllm
    roots: list[Path]                    # resolved
    base_ref: str                        # the served base model as it was named (toy, a hub id, a path)
    base_dir: Path
    max_rank: Optional[int] = None       # vLLM's --max-lora-rank
    base_vocab: Optional[int] = None
    notes: list[str] = field(default_factory=list)

    def inspect(self, name: str, raw_path: str) -> Path:
        """The adapter directory to load, or ApiError with the reason (blocking: file reads)."""
        try:
            path = self.confine(raw_path)
            config = self._config(path)
        except (OSError, RuntimeError, ValueError) as exc:   # a name too long, a loop of links, ~nobody, ...
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise refused(400, f"lora_path: cannot use {raw_path[:200]!r} ({reason})", "adapter_not_found") from None
        problem = self.base_problem(path)
        if problem:
            raise refused(400, f"lora_path: {problem}", "adapter_base_mismatch")
        problems = self.engine_problems(path, config)
        if problems:
            raise refused(400, f"lora_path: the {self.engine} engine cannot serve this adapter: {'; '.join(problems)}",
                          "adapter_unsupported")
        return path

    def confine(self, raw_path: str) -> Path:
        real = Path(os.path.realpath(Path(raw_path).expanduser()))     # symlinks and `..` resolved
        if not any(real == root or real.is_relative_to(root) for root in self.roots):
            allowed = ", ".join(str(r) for r in self.roots)
            raise refused(403, f"lora_path: {raw_path} is outside the adapter roots this server allows ({allowed}); "
                               "start it with --adapter-root DIR to allow another", "adapter_path_forbidden")
        if not real.is_dir():
            raise refused(404, f"lora_path: no adapter directory at {raw_path}", "adapter_not_found")
        for entry in real.iterdir():       # what PEFT reads must not lead out of the roots either
            target = Path(os.path.realpath(entry))
            if not any(target == root or target.is_relative_to(root) for root in self.roots):
                raise refused(403, f"lora_path: {entry.name} in {raw_path} links outside the adapter roots",
                              "adapter_path_forbidden")
        return real

    def _config(self, path: Path) -> dict:
        if not (path / CONFIG).is_file():
            raise refused(400, f"lora_path: {path} is not a LoRA adapter directory (no {CONFIG})", "not_an_adapter")
        try:
            config = json.loads((path / CONFIG).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise refused(400, f"lora_path: {CONFIG} cannot be read ({exc})", "not_an_adapter") from None
        if not isinstance(config, dict):
            raise refused(400, f"lora_path: {CONFIG} is not a JSON object", "not_an_adapter")
        if not (path / WEIGHTS).is_file():
            raise refused(400, f"lora_path: {path} has no {WEIGHTS} (swiftbox loads safetensors weights only)",
                          "not_an_adapter")
        return config

    def base_problem(self, path: Path) -> Optional[str]:
        """Why the adapter is not for this server's base model (None: it is)."""
        from swiftbox.errors import UserError
        from swiftbox.hub.resolve import resolve_model, resolves_without_network
        from swiftbox.modeling.loading import adapter_base_ref

        try:
            ref = adapter_base_ref(path)
        except UserError:
            return "the adapter does not say which base model it was trained on"
        if ref == self.base_ref:
            return None
        if resolves_without_network(ref):    # never a download here
            try:
                if os.path.realpath(resolve_model(ref)) == os.path.realpath(self.base_dir):
                    return None
            except UserError:
                pass
        else:  # a hub id: the served directory is that id's snapshot
            here = str(self.base_dir).rstrip("/")
            for hub_id in {ref, ref.removeprefix("hf:")}:
                if hub_id.replace("/", "--") in here or here.endswith(hub_id):
                    return None
        return f"the adapter was trained on {ref}; this server serves {self.base_ref}"

    def engine_problems(self, path: Path, config: dict) -> list[str]:
        if config.get("peft_type", "LORA") != "LORA":
            return [f"peft_type {config.get('peft_type')} (LoRA adapters only)"]
        if self.engine == "builtin":
            return fit.adapter_problems_for_builtin(path)

        problems = fit.adapter_problems_for_vllm(path, self.base_vocab)
        rank = fit.adapter_rank(config)
        if self.max_rank is not None and rank > self.max_rank:
            problems.append(f"rank {rank} > the server's max_lora_rank {self.max_rank} (restart it with "
                            f"--max-lora-rank {rank} or more)")
        return problems


def default_roots() -> list[str]:
    return ["runs"]


def make_policy(cfg, engine: str, spec, *, max_rank: Optional[int] = None) -> Optional[AdapterPolicy]:
    """The policy for this serve config, or None where runtime adapters are off."""
    if not runtime_enabled(cfg, engine, bool(cfg.adapters) or bool(spec.adapters)):
        return None
    roots = [Path(os.path.realpath(Path(r).expanduser())) for r in (cfg.adapter_root or default_roots())]
    vocab = fit.vocab_size(Path(spec.base))
    return AdapterPolicy(engine=engine, roots=roots, base_ref=spec.base_ref, base_dir=Path(spec.base),
                         max_rank=max_rank, base_vocab=vocab)


def runtime_enabled(cfg, engine: str, has_static: bool) -> bool:
    """`runtime_adapters` unset: on for the built-in engine (it costs nothing); on vLLM only where LoRA is on
    anyway (adapters given at start), since --enable-lora costs vLLM memory and speed."""
    if cfg.runtime_adapters is not None:
        return bool(cfg.runtime_adapters)
    return engine == "builtin" or has_static

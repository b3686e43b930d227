"""Runtime LoRA adapters: the policy behind `POST /v1/load_lora_adapter {lora_name, lora_path}` and
`POST /v1/unload_lora_adapter {lora_name}` (the routes: routes/adapters.py, in vLLM's shape).

The checks are the same for both engines and run before any engine sees the path (`AdapterPolicy.inspect`):
- the path, after resolving symlinks and `..`, lies under one of the allowed roots (`--adapter-root`, default
  the runs directory), and so does every file PEFT will read from it (a symlinked weight file cannot escape);
- it is a PEFT LoRA directory with safetensors weights (no pickled `.bin`);
- it was trained on the base model this server serves, by identity: the same resolved directory, or the same
  hub id (whole, not a substring: `acme/tiny` is not `acme/tiny-Instruct`) at a revision that is not another one;
- the engine can serve it: the built-in engine mixes adapters per row, which PEFT does not do for DoRA; vLLM
  has its limits (fit.py) and the `max_lora_rank` it was started with;
- it is only a LoRA delta (adapter_check.py: no option that rewrites the base or changes the architecture, rank
  at most the cap, every tensor a finite LoRA matrix) and it fits: at most `--max-loaded-adapters` runtime
  adapters at once (429 past it) and `--max-adapter-memory-mb` between them.
Then the engine loads it: the built-in engine between two steps on its own thread from the checked tensors
(adapter_slots.py), vLLM through its runtime LoRA updating mode (vllm/child.py). A refusal is a 4xx with the
reason; the server goes on serving. Loads are checked one at a time (`loading`), so the count and the memory
hold however many clients load at once.
"""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from swiftbox.modeling import adapter_file
from swiftbox.modeling.adapter_file import AdapterFile, AdapterFileError, is_adapter_dir
from swiftbox.serving import fit
from swiftbox.serving.adapter_check import AdapterRefused, CheckedAdapter, check_config, check_weights, module_names_of
from swiftbox.serving.errors import ApiError

WEIGHTS = "adapter_model.safetensors"
CONFIG = adapter_file.CONFIG


def refused(status: int, message: str, code: str, param: str = "lora_path") -> ApiError:
    return ApiError(status, message, param=param, code=code)


@dataclass
class AdapterPolicy:
    """What this server lets clients load at run time."""

    engine: str                          # builtin | vllm
    roots: list[Path]                    # resolved
    base_ref: str                        # the served base model as it was named (toy, a hub id, a path)
    base_dir: Path
    base_name: str = ""                  # the base as it is served (what a client sees; never a server path)
    max_rank: Optional[int] = None       # the largest LoRA rank a runtime adapter may have (vLLM's --max-lora-rank)
    base_vocab: Optional[int] = None
    notes: list[str] = field(default_factory=list)
    max_loaded: int = 16                 # runtime adapters loaded at once
    max_bytes: int = 4096 << 20          # what their LoRA matrices may take together
    loaded: dict[str, int] = field(default_factory=dict)     # runtime adapter name -> bytes
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _loading: Any = field(default=None, repr=False)          # an asyncio.Lock, made on the serving loop
    _modules: Optional[list[str]] = field(default=None, repr=False)
    _identity: Optional[BaseIdentity] = field(default=None, repr=False)

    @property
    def loading(self) -> Any:
        """The asyncio lock a load holds from its check to its end (made on first use, on the serving loop)."""
        import asyncio

        if self._loading is None:
            self._loading = asyncio.Lock()
        return self._loading

    def inspect(self, name: str, raw_path: str) -> CheckedAdapter:
        """The checked adapter to load, or ApiError with the reason (blocking: file reads)."""
        try:
            path = self.confine(raw_path)
            record = self._config(path, raw_path)
        except (OSError, RuntimeError, ValueError) as exc:   # a name too long, a loop of links, ~nobody, ...
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise refused(400, f"lora_path: cannot use {raw_path[:200]!r} ({reason})", "adapter_not_found") from None
        problem = self.base_problem(path)
        if problem:
            raise refused(400, f"lora_path: {problem}", "adapter_base_mismatch")
        problems = self.engine_problems(path, record)
        if problems:
            raise refused(400, f"lora_path: the {self.engine} engine cannot serve this adapter: {'; '.join(problems)}",
                          "adapter_unsupported")
        self.check_count()
        try:
            options = check_config(dict(record.raw), engine=self.engine, max_rank=self.rank_cap,
                                   module_names=self.module_names)
            return check_weights(path, options, bytes_left=self.bytes_left(), keep=self.engine == "builtin",
                                 budget_hint=f"--max-adapter-memory-mb {self.max_bytes >> 20}; unload one first "
                                             "or restart with more")
        except AdapterRefused as why:
            where = CONFIG if why.field != "weights" else "adapter_model.safetensors"
            raise refused(why.status, f"lora_path: {where}: {why}", why.code) from None

    # -- the count and memory of runtime adapters ---------------------------------------------------
    @property
    def rank_cap(self) -> int:
        return self.max_rank or fit.BUILTIN_MAX_LORA_RANK

    def check_count(self) -> None:
        with self._lock:
            if len(self.loaded) >= self.max_loaded:
                raise ApiError(429, f"lora_name: {len(self.loaded)} runtime adapters are loaded, the most this server "
                                    f"holds (--max-loaded-adapters {self.max_loaded}); unload one first",
                               type="rate_limit_error", param="lora_name", code="adapter_limit")

    def bytes_left(self) -> int:
        with self._lock:
            return self.max_bytes - sum(self.loaded.values())

    def admitted(self, name: str, checked: CheckedAdapter) -> None:
        """`name` is loaded now: it counts against the caps until it is unloaded."""
        with self._lock:
            self.loaded[name] = checked.nbytes

    def released(self, name: str) -> None:
        with self._lock:
            self.loaded.pop(name, None)

    def module_names(self) -> list[str]:
        if self._modules is None:
            self._modules = module_names_of(self.base_dir)
        return self._modules

    def confine(self, raw_path: str) -> Path:
        real = Path(os.path.realpath(Path(raw_path).expanduser()))     # symlinks and `..` resolved
        if not any(real == root or real.is_relative_to(root) for root in self.roots):
            # the roots are the server's own paths: their count, never their names (a client learns no layout)
            count = f"{len(self.roots)} director{'y' if len(self.roots) == 1 else 'ies'}"
            raise refused(403, f"lora_path: {raw_path[:200]} is outside the adapter roots this server allows "
                               f"({count}); start it with --adapter-root DIR to allow another",
                          "adapter_path_forbidden")
        if not real.is_dir():
            raise refused(404, f"lora_path: no adapter directory at {raw_path[:200]}", "adapter_not_found")
        for entry in real.iterdir():       # what PEFT reads must not lead out of the roots either
            target = Path(os.path.realpath(entry))
            if not any(target == root or target.is_relative_to(root) for root in self.roots):
                raise refused(403, f"lora_path: {entry.name[:120]} in {raw_path[:200]} links outside the adapter roots",
                              "adapter_path_forbidden")
        return real

    def _config(self, path: Path, shown: str) -> AdapterFile:
        """The adapter's config; errors name the directory as the client wrote it (`shown`), never its real path."""
        shown = shown[:200]
        if not is_adapter_dir(path):
            raise refused(400, f"lora_path: {shown} is not a LoRA adapter directory (no {CONFIG})", "not_an_adapter")
        try:
            record = AdapterFile.read(path)
        except AdapterFileError as exc:     # its reason names the file, never the server's path
            raise refused(400, f"lora_path: {exc.reason}", "adapter_unsupported" if exc.field else "not_an_adapter"
                          ) from None
        if not (path / WEIGHTS).is_file():
            raise refused(400, f"lora_path: {shown} has no {WEIGHTS} (swiftbox loads safetensors weights only)",
                          "not_an_adapter")
        return record

    def base_problem(self, path: Path) -> Optional[str]:
        """Why the adapter is not for this server's base model (None: it is). Never a download."""
        from swiftbox.errors import UserError
        from swiftbox.modeling.loading import adapter_base_ref

        try:
            ref = adapter_base_ref(path)
        except UserError:
            return "the adapter does not say which base model it was trained on"
        revision = _config_value(path, "revision")
        if self._identity is None:
            self._identity = BaseIdentity.of(self.base_ref, self.base_dir)
        if self._identity.matches(ref, revision if isinstance(revision, str) else None):
            return None
        named = shown_ref(ref) + (f"@{revision[:80]}" if isinstance(revision, str) and revision else "")
        return f"the adapter was trained on {named}; this server serves {self.base_name or shown_ref(self.base_ref)}"

    def engine_problems(self, path: Path, record: AdapterFile) -> list[str]:
        problem = adapter_file.type_problem(record)
        if problem:
            return [problem]
        if self.engine == "builtin":
            return fit.adapter_problems_for_builtin(path)

        problems = fit.adapter_problems_for_vllm(path, self.base_vocab)
        rank = record.max_rank
        if self.max_rank is not None and rank > self.max_rank:
            problems.append(f"rank {rank} > the server's max_lora_rank {self.max_rank} (restart it with "
                            f"--max-lora-rank {rank} or more)")
        return problems


def _config_value(path: Path, key: str) -> Any:
    try:
        return AdapterFile.read(path).raw.get(key)
    except AdapterFileError:
        return None


def shown_ref(ref: str) -> str:
    """A model reference as an error may show it to a client: a hub id or a bare name as written; a filesystem path
    (the server's, or the training machine's) only by its last component."""
    text = str(ref).strip()[:200]
    if hub_ids(text) or not any(sep in text for sep in ("/", "\\")) or text.lower().startswith(HUB_PREFIXES):
        return text
    return f"a local model directory named {Path(text).name or text.strip('/') or '/'!r}"


HUB_PREFIXES = ("hf:", "ms:", "modelscope:")
DEFAULT_REVISIONS = ("main", "master")


def hub_ids(ref: str) -> set[str]:
    """The hub ids (lower case ORG/NAME, no hub prefix) a reference names: a preset's ids on both hubs, or the one
    id it spells; empty for anything else (a path, toy, a bare name)."""
    from swiftbox.catalog.presets import find

    text = ref.strip()
    for prefix in HUB_PREFIXES:
        if text.lower().startswith(prefix):
            text = text[len(prefix):].strip()
    preset = find(text)
    if preset is not None:
        return {preset.hf_id.lower(), preset.modelscope_id.lower()}
    return {text.lower()} if re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", text) else set()


@dataclass
class BaseIdentity:
    """What the served base model is: its resolved directories, the hub ids it is a snapshot of and the revisions
    of that snapshot (commit or branch, where known)."""

    paths: set[str]
    ids: set[str]
    revisions: set[str]

    @classmethod
    def of(cls, base_ref: str, base_dir: Path) -> BaseIdentity:
        from swiftbox.artifacts import read_manifest
        from swiftbox.errors import UserError

        paths, ids, revisions = {os.path.realpath(base_dir)}, hub_ids(base_ref), set()
        try:
            manifest = read_manifest(base_dir) or {}
        except UserError:
            manifest = {}
        if isinstance(manifest.get("cache_path"), str):          # a download step's output: links into the cache
            paths.add(os.path.realpath(manifest["cache_path"]))
        if isinstance(manifest.get("model_id"), str):
            ids |= hub_ids(manifest["model_id"])
        revisions |= {str(manifest[k]) for k in ("revision", "commit") if manifest.get(k)}
        for folder in (Path(p) for p in sorted(paths)):           # a hub cache snapshot: .../ORG--NAME/snapshots/REV
            if folder.parent.name == "snapshots":
                repo = folder.parent.parent.name.removeprefix("models--")
                org, sep, name = repo.partition("--")
                if sep and org and name:
                    ids |= hub_ids(f"{org}/{name}")
                    revisions.add(folder.name)
        return cls(paths=paths, ids=ids, revisions=revisions)

    def matches(self, ref: str, revision: Optional[str] = None) -> bool:
        from swiftbox.errors import UserError
        from swiftbox.hub.resolve import resolve_model, resolves_without_network

        if resolves_without_network(ref):       # toy, a local directory, a cached preset: compare the directories
            try:
                return os.path.realpath(resolve_model(ref)) in self.paths
            except UserError:
                return False
        named = hub_ids(ref)
        same = bool(named & self.ids)
        if not same and named:                  # a hub id downloaded earlier: its snapshot may be what is served
            from swiftbox.hub.snapshot import cached_snapshot

            try:
                cached = cached_snapshot(ref, revision)
            except (UserError, OSError, ValueError):
                cached = None
            same = cached is not None and os.path.realpath(cached) in self.paths
        if not same:
            return False
        if not revision or revision in DEFAULT_REVISIONS or not self.revisions:
            return True
        return any(r == revision or (len(revision) >= 7 and r.startswith(revision)) for r in self.revisions)


def default_roots() -> list[str]:
    return ["runs"]


def make_policy(cfg, engine: str, spec, *, max_rank: Optional[int] = None,
                base_name: str = "") -> Optional[AdapterPolicy]:
    """The policy for this serve config, or None where runtime adapters are off."""
    if not runtime_enabled(cfg, engine, bool(cfg.adapters) or bool(spec.adapters)):
        return None
    roots = [Path(os.path.realpath(Path(r).expanduser())) for r in (cfg.adapter_root or default_roots())]
    vocab = fit.vocab_size(Path(spec.base))
    return AdapterPolicy(engine=engine, roots=roots, base_ref=spec.base_ref, base_dir=Path(spec.base),
                         base_name=base_name, max_rank=max_rank, base_vocab=vocab, max_loaded=cfg.max_loaded_adapters,
                         max_bytes=cfg.max_adapter_memory_mb << 20)


def runtime_enabled(cfg, engine: str, has_static: bool) -> bool:
    """`runtime_adapters` unset: on for the built-in engine (it costs nothing); on vLLM only where LoRA is on
    anyway (adapters given at start), since --enable-lora costs vLLM memory and speed."""
    if cfg.runtime_adapters is not None:
        return bool(cfg.runtime_adapters)
    return engine == "builtin" or has_static

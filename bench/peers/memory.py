"""What holds a training process's memory: a ledger any `transformers.Trainer` side of the bench can carry.

torch has no allocator statistics on the CPU, so the ledger accounts by construction, the same way in every
framework's process (it needs only torch):

- weights (frozen / trainable), gradients and optimizer state: the bytes of the tensors the trainer holds;
- activations: every tensor autograd saves for the backward pass during a training step's forward
  (`torch.autograd.graph.saved_tensors_hooks`), each storage counted once, parameters excluded, and filed under the
  module that saved it (innermost named module: attention, mlp, LoRA, LoRA dropout copies, the LM head and loss,
  embedding, the rest of a decoder layer) - plus `masks` (boolean square tensors: attention masks) and `ids`
  (integer tensors). That is the autograd graph's whole footprint at its largest, the end of the forward;
- data: the train dataset's Arrow table (`Dataset.data.nbytes`) where it has one;
- the process: resident memory (VmRSS) at the end of the largest forward and its peak over the training steps, and
  glibc's view (`mallinfo2`: bytes malloc holds from the OS vs bytes in use), so a gap between what tensors hold and
  what the process holds shows as `allocator_free_held` rather than as a mystery.

`unaccounted` = RSS at the end of the largest forward minus everything above (the interpreter, libraries' code and
heaps, the tokenizer, allocator slack). Activation checkpointing saves tensors through its own hooks, so under it
only the checkpoints' boundaries are seen (and the recomputation in backward is counted as `recomputed_bytes`).
"""
from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from typing import Any

GIB = 2 ** 30


def rss_bytes() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def malloc_info() -> dict | None:
    """glibc's totals: `held` (heap arenas + mmapped chunks, from the OS), `in_use` (allocated to the program),
    `free_held` (freed but not given back). None off glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    info = fn()
    held = info.arena + info.hblkhd
    in_use = info.uordblks + info.hblkhd
    return {"held": held, "in_use": in_use, "free_held": held - in_use, "mmapped": info.hblkhd}


def category(module_name: str, tensor: Any, lora_ranks: frozenset[int] | None = None) -> str:
    """Where a saved tensor belongs, from the innermost module that saved it and its shape/dtype. `lora_ranks`: the
    adapter ranks when that module is a whole LoRA layer computing in one call (swiftbox's fused LoRA layer saves its
    dropout as int32 positions and `dropout(x) @ A^T` as a `[tokens, rank]` tensor there)."""
    import torch

    if tensor.dtype == torch.bool and tensor.dim() >= 2 and tensor.shape[-1] == tensor.shape[-2] > 1:
        return "masks"
    if lora_ranks:
        if not tensor.is_floating_point():
            return "dropout_masks"
        if tensor.dim() >= 1 and tensor.shape[-1] in lora_ranks:
            return "lora"
    if tensor.dtype == torch.bool:
        return "dropout_masks" if "lora" in module_name else "masks"
    if not tensor.is_floating_point():
        return "ids"
    if "lora_dropout" in module_name:
        return "lora_dropout_copies"
    if ".lora_" in module_name or module_name.endswith(("lora_A", "lora_B")):
        return "lora"
    if "lm_head" in module_name or "score" in module_name.rsplit(".", 1)[-1]:
        return "lm_head_loss"
    if "self_attn" in module_name or ".attn" in module_name or "attention" in module_name:
        return "attention"
    if ".mlp" in module_name or "feed_forward" in module_name:
        return "mlp"
    if "embed" in module_name:
        return "embedding"
    if ".layers." in module_name or ".h." in module_name:
        return "layer_other"
    return "lm_head_loss"      # saved by the top model itself: a fused LM head / the loss outside any submodule


def _storage_key(t: Any) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


class Ledger:
    """Attach to a trainer, run its training steps under `step()`; `report()` is the JSON-ready breakdown."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.lora_ranks: dict[str, frozenset[int]] = {}
        self.stack: list[str] = []
        self.params: set[int] = set()
        self.steps = 0
        self.best: dict[str, Any] = {"activations": 0}
        self.rss_peak = 0
        self.rss_start = 0
        self.recomputed = 0
        self.trainer: Any = None
        self._hooks: list[Any] = []
        self._poll_stop = threading.Event()
        self._poller: threading.Thread | None = None

    # -- setup ----------------------------------------------------------------------------------
    def attach(self, trainer: Any) -> None:
        self.trainer = trainer

    def _setup(self, model: Any) -> None:
        import torch

        self.names = {id(m): name for name, m in model.named_modules()}
        self.lora_ranks = {name: frozenset(a.out_features for a in m.lora_A.values())
                           for name, m in model.named_modules()
                           if isinstance(getattr(m, "lora_A", None), torch.nn.ModuleDict) and len(m.lora_A)}
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.rss_start = rss_bytes()
        pre = torch.nn.modules.module.register_module_forward_pre_hook(self._enter)
        post = torch.nn.modules.module.register_module_forward_hook(self._leave)
        self._hooks = [pre, post]
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._poll_stop.is_set():
            self.rss_peak = max(self.rss_peak, rss_bytes())
            time.sleep(0.05)

    def _enter(self, module: Any, args: Any) -> None:
        name = self.names.get(id(module))
        if name is not None:
            self.stack.append(name)

    def _leave(self, module: Any, args: Any, out: Any) -> None:
        if self.names.get(id(module)) is not None and self.stack:
            self.stack.pop()
            # the outermost model's forward returned, having saved something (a DPO reference forward under
            # no_grad saves nothing: the policy forward after it is the one that counts)
            if not self.stack and self._live is not None and self._by_cat:
                self._forward_end()

    # -- one step -------------------------------------------------------------------------------
    _live: dict[tuple[int, int], str] | None = None

    @contextlib.contextmanager
    def step(self, model: Any) -> Any:
        import torch

        if not self.names:
            self._setup(model)
        self._live = {}
        self._forward_done = False
        self._by_cat: dict[str, int] = {}

        def pack(t: Any) -> Any:
            try:
                key = _storage_key(t)
            except (RuntimeError, NotImplementedError):
                return t
            if key[0] in self.params or key in self._live:  # type: ignore[operator]
                return t
            if self._forward_done:
                self.recomputed += key[1]
                return t
            inner = self.stack[-1] if self.stack else ""
            cat = category(inner, t, self.lora_ranks.get(inner))
            self._live[key] = cat  # type: ignore[index]
            self._by_cat[cat] = self._by_cat.get(cat, 0) + key[1]
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            try:
                yield
            finally:
                if not self._forward_done:
                    self._forward_end()
                self._live = None
                self.steps += 1

    def _forward_end(self) -> None:
        if self._forward_done:
            return
        self._forward_done = True
        total = sum(self._by_cat.values())
        if total >= self.best["activations"]:
            self.best = {"activations": total, "by_category": dict(self._by_cat), "rss": rss_bytes(),
                         "malloc": malloc_info(), "step": self.steps}

    # -- the report ----------------------------------------------------------------------------
    def close(self) -> None:
        self._poll_stop.set()
        for h in self._hooks:
            h.remove()

    def report(self) -> dict:
        self.close()
        t = self.trainer
        model = getattr(t, "model", None)
        out: dict[str, Any] = {"steps_seen": self.steps}
        if model is None or not self.steps:
            return out
        frozen = trainable = grads = 0
        for p in model.parameters():
            n = p.numel() * p.element_size()
            if p.requires_grad:
                trainable += n
            else:
                frozen += n
            if p.grad is not None:
                grads += p.grad.numel() * p.grad.element_size()
        if not grads:        # the trainer zeroes grads to None after each step: trainable weights' size then
            grads = trainable
        opt = 0
        optimizer = getattr(t, "optimizer", None)
        for state in (getattr(optimizer, "state", {}) or {}).values():
            for v in state.values():
                if hasattr(v, "element_size") and hasattr(v, "numel"):
                    opt += v.numel() * v.element_size()
        data = 0
        ds = getattr(t, "train_dataset", None)
        with contextlib.suppress(Exception):
            data = int(ds.data.nbytes)
        acts = self.best.get("activations", 0)
        cats = {k: v for k, v in sorted(self.best.get("by_category", {}).items(), key=lambda kv: -kv[1])}
        accounted = frozen + trainable + grads + opt + acts + data
        rss_fwd = self.best.get("rss", 0)
        malloc = self.best.get("malloc")
        out.update({
            "weights_frozen": frozen, "weights_trainable": trainable, "gradients": grads, "optimizer_state": opt,
            "activations": acts, "activations_by": cats, "data_arrow": data,
            "rss_before_training": self.rss_start, "rss_at_forward_end": rss_fwd, "rss_peak_training": self.rss_peak,
            "unaccounted": rss_fwd - accounted, "recomputed_bytes": self.recomputed,
            "allocator_free_held": malloc["free_held"] if malloc else None, "malloc": malloc,
        })
        return out


def gib(report: dict) -> dict:
    """The report in GiB (3 decimals) for a human-readable line; nested dicts converted too."""
    def conv(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        return round(v / GIB, 3) if isinstance(v, int) and not isinstance(v, bool) and v > 4096 else v

    return {k: (v if k == "steps_seen" else conv(v)) for k, v in report.items()}

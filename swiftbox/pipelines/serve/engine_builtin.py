"""The built-in engine: one shared transformers model, continuous (in-flight) batching, LoRA per request.

Why not transformers' own `ContinuousBatchingManager` (`init_continuous_batching` / `generate_batch`,
checked in transformers 5.23): it packs every request into one ragged row for paged attention, so
PEFT's per-row `adapter_names` cannot pick a LoRA adapter per request; it has no per-request seed,
stop strings, penalties or `n`. So this is a compact scheduler instead:

- a background thread owns the model. Each iteration it admits waiting requests into free slots
  (each prompt prefilled on its own, then merged into the batch), then runs ONE decode step for every active
  sequence together, with a shared left-padded `DynamicCache`, an attention mask and explicit
  position ids per row;
- each row names its adapter (`adapter_names=[...]`, "__base__" for the base model), so requests for
  different adapters share a batch without touching each other's weights;
- sampling is per row: a row whose scores are not finite (or whose settings break the sampler) fails
  that request alone, and the rest of the batch goes on; so does a prompt whose own prefill fails;
- finished or cancelled rows leave the batch between steps (`batch_select_indices`) and the columns
  that have become padding for every row are trimmed, so the cache never grows past the longest row.

Adapters are loaded and unloaded at run time between two steps, on this thread (`load_adapter` /
`unload_adapter`, registry in adapter_slots.py); an unloaded adapter's weights stay until its last sequence ends.

The waiting queue is bounded (`max_waiting`): past it `submit` raises QueueFull, which the front door
answers with 429 and Retry-After. Tokens go back to the asyncio side through `loop.call_soon_threadsafe`;
text, stop strings and SSE are handled there (see app.py), which cancels the sequence when a stop string
appears.
"""
from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from swiftbox.pipelines.serve.adapter_slots import AdapterGone, AdapterSlots
from swiftbox.pipelines.serve.sampling import SamplingParams, make_generator, sample_row

log = logging.getLogger("swiftbox.serve")
BASE = "__base__"


class QueueFull(RuntimeError):
    """The waiting queue is at its bound: the request is refused (429) instead of queued without limit."""

    def __init__(self, waiting: int):
        super().__init__(f"{waiting} sequences are waiting")
        self.waiting = waiting


@dataclass
class Sequence:
    id: int
    prompt_ids: list[int]
    params: SamplingParams
    adapter: Optional[str]
    sink: Any                       # callable(event) run on the asyncio loop
    loop: Any
    out_ids: list[int] = field(default_factory=list)
    cancelled: bool = False
    done: bool = False
    generator: Any = None
    submitted: float = field(default_factory=time.monotonic)
    outbox: list = field(default_factory=list)   # the engine's: events wait there until the step's flush

    @property
    def pos(self) -> int:
        """Position id of the last token fed (prompt + generated so far, minus the pending one)."""
        return len(self.prompt_ids) + len(self.out_ids) - 1

    def emit(self, event: tuple) -> None:
        self.outbox.append((self, event))


def _deliver(items: list) -> None:
    """On the asyncio loop: hand a step's events to their requests, in order."""
    for seq, event in items:
        seq.sink(event)


class Handle:
    """What a request holds: cancel() frees the slot (client gone, stop string seen)."""

    def __init__(self, engine: BuiltinEngine, seq: Sequence):
        self._engine, self.seq = engine, seq

    def cancel(self) -> None:
        if not self.seq.done:
            self.seq.cancelled = True
            self._engine._wake()


class BuiltinEngine:
    name = "builtin"

    def __init__(self, model, tokenizer, *, base_name: str, adapters: list[str], max_batch_size: int = 8,
                 max_model_len: int = 2048, device=None, max_waiting: int = 128):
        self.model, self.tokenizer = model, tokenizer
        self.base_name = base_name
        self.slots = AdapterSlots(list(adapters))   # served adapters + loads/unloads for this thread
        self.max_batch_size, self.max_model_len = max_batch_size, max_model_len
        self.max_waiting = max_waiting
        self.device = device
        self.is_peft = hasattr(model, "peft_config")
        eos = getattr(model, "generation_config", None)
        ids = set()
        for source in (getattr(eos, "eos_token_id", None), tokenizer.eos_token_id):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(int(i) for i in source)
        self.eos_ids = ids
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(ids or {0})
        self._waiting: collections.deque[Sequence] = collections.deque()
        self._active: list[Sequence] = []
        self._cache: Any = None
        self._mask: Any = None
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._stop = False
        self._thread: Optional[threading.Thread] = None
        self._outbox: list = []
        self.stats = {"requests": 0, "tokens": 0, "steps": 0, "prefills": 0, "cancelled": 0, "errors": 0}

    # -- public -----------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return [self.base_name, *self.slots.names()]

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="swiftbox-engine", daemon=True)
            self._thread.start()

    def shutdown(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def submit(self, prompt_ids: list[int], params: SamplingParams, adapter: Optional[str], sink, loop) -> Handle:
        """Queue one sequence; `sink(event)` gets ("token", id) ..., then ("done", reason) or ("error", msg)."""
        seq = Sequence(next(self._ids), list(prompt_ids), params, adapter, sink, loop,
                       generator=make_generator(params.seed), outbox=self._outbox)
        with self._cond:
            if not self.slots.usable(adapter):
                raise AdapterGone(adapter)
            if len(self._waiting) >= self.max_waiting:
                raise QueueFull(len(self._waiting))
            self._waiting.append(seq)
            self.stats["requests"] += 1
            self._cond.notify_all()
        return Handle(self, seq)

    def load(self) -> dict:
        return {"active": len(self._active), "waiting": len(self._waiting)}

    def has_room(self, n: int) -> bool:
        """Whether `n` more sequences may wait now (the front door answers 429 otherwise)."""
        return len(self._waiting) + n <= self.max_waiting

    # -- runtime adapters (the front door's /v1/load_lora_adapter, /v1/unload_lora_adapter) --
    def adapter_id(self, name: str) -> Optional[str]:
        """The PEFT adapter serving model `name` (None: the base model); KeyError when it is not served."""
        return None if name == self.base_name else self.slots.resolve(name)

    def load_adapter(self, name: str, path: str):
        """A concurrent Future, done once the engine's thread has loaded the adapter between two steps."""
        future = self.slots.request_load(name, path)
        self._wake()
        return future

    def unload_adapter(self, name: str) -> None:
        """`name` stops being served now; its weights go once the sequences using them have finished."""
        self.slots.request_unload(name)
        self._wake()

    def _apply_adapter_changes(self) -> None:
        with self._cond:  # submit() checks usability under this lock: nothing joins a retired adapter
            free = self.slots.retire(self._adapters_in_use())
        self.model = self.slots.apply(self.model, free)
        self.is_peft = hasattr(self.model, "peft_config")

    def _adapters_in_use(self) -> set:
        """Adapters a sequence still needs: every sequence the engine holds (call under self._cond)."""
        return {s.adapter for s in self._active} | {s.adapter for s in self._waiting}

    # -- the loop ---------------------------------------------------------------------------
    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _run(self) -> None:
        import torch

        with torch.inference_mode():
            while True:
                with self._cond:
                    while not self._stop and not self._waiting and not self._active and not self.slots.pending():
                        self._cond.wait(timeout=1.0)
                    if self._stop:
                        break
                if self.slots.pending():
                    self._apply_adapter_changes()
                with self._cond:
                    room = self.max_batch_size - len(self._active)
                    newcomers = []
                    while room > 0 and self._waiting:
                        seq = self._waiting.popleft()
                        if seq.cancelled:
                            self._finish(seq, "cancelled")
                            continue
                        newcomers.append(seq)
                        room -= 1
                try:
                    self._drop_finished()
                    if newcomers:
                        self._prefill(newcomers)
                        self._drop_finished()
                    if self._active:
                        self._decode()
                except Exception as exc:  # a failed step fails its sequences, never the server
                    log.exception("engine step failed")
                    self.stats["errors"] += 1
                    for seq in self._active + [s for s in newcomers if not s.done]:
                        if not seq.done:
                            seq.done = True
                            seq.emit(("error", f"{type(exc).__name__}: {exc}"))
                    self._active, self._cache, self._mask = [], None, None
                self._flush()
            for seq in list(self._active) + list(self._waiting):
                seq.done = True
                seq.emit(("error", "server shutting down"))
            self._flush()

    def _flush(self) -> None:
        """One wake-up per event loop per step, not one per token: each `call_soon_threadsafe` writes the
        loop's self-pipe and hands the GIL to the loop's thread, and where a decode step is short (a GPU, or
        a tiny model on a CPU) those hand-overs cost as much as the batched step itself."""
        if not self._outbox:
            return
        by_loop: dict = {}
        for seq, event in self._outbox:
            by_loop.setdefault(seq.loop, []).append((seq, event))
        self._outbox.clear()
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # the event loop is closed: the server is shutting down
                for seq, _ in items:
                    seq.cancelled = True

    def _forward(self, input_ids, mask, positions, cache, adapters, logits_to_keep=1):
        kwargs = dict(input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                      use_cache=True, logits_to_keep=logits_to_keep)
        if self.is_peft:
            kwargs["adapter_names"] = [a or BASE for a in adapters]
        out = self.model(**kwargs)
        return out.logits[:, -1, :], out.past_key_values

    def _prefill(self, seqs: list[Sequence]) -> None:
        """Prompts are prefilled one at a time: on a compute-bound device a padded batch of prompts costs
        the padding too, and prefill gains little from batching; each result joins the running batch."""
        import torch
        from transformers import DynamicCache

        dev = self.device
        for seq in seqs:
            if seq.cancelled:
                self._finish(seq, "cancelled")
                continue
            self.stats["prefills"] += 1
            ids = torch.tensor([seq.prompt_ids], dtype=torch.long, device=dev)
            mask = torch.ones_like(ids)
            positions = torch.arange(ids.shape[1], device=dev).unsqueeze(0)
            try:  # a prompt the model cannot take fails its own request; the running batch is untouched
                logits, cache = self._forward(ids, mask, positions, DynamicCache(), [seq.adapter])
            except Exception as exc:
                self._fail(seq, exc)
                continue
            self._merge(cache, mask, [seq])
            self._sample(logits, [seq])
            self._flush()             # the first token goes out now, not after the other prompts

    def _merge(self, cache, mask, seqs) -> None:
        """Append rows (their cache + mask) to the running batch, left-padding to a common length."""
        import torch
        import torch.nn.functional as F

        from swiftbox.compat import cache_from_layers, cache_layers

        if self._cache is None or not self._active:
            self._cache, self._mask, self._active = cache, mask, list(seqs)
            return
        old_t, new_t = self._mask.shape[1], mask.shape[1]
        t = max(old_t, new_t)
        layers = []
        for (old_k, old_v), (new_k, new_v) in zip(cache_layers(self._cache), cache_layers(cache), strict=True):
            k = torch.cat([F.pad(old_k, (0, 0, t - old_t, 0)), F.pad(new_k, (0, 0, t - new_t, 0))])
            v = torch.cat([F.pad(old_v, (0, 0, t - old_t, 0)), F.pad(new_v, (0, 0, t - new_t, 0))])
            layers.append((k, v))
        self._cache = cache_from_layers(layers)
        self._mask = torch.cat([F.pad(self._mask, (t - old_t, 0)), F.pad(mask, (t - new_t, 0))])
        self._active.extend(seqs)

    def _decode(self) -> None:
        import torch

        self.stats["steps"] += 1
        dev = self.device
        seqs = self._active
        ids = torch.tensor([[s.out_ids[-1]] for s in seqs], dtype=torch.long, device=dev)
        self._mask = torch.cat([self._mask, torch.ones((len(seqs), 1), dtype=self._mask.dtype, device=dev)], dim=1)
        positions = torch.tensor([[s.pos] for s in seqs], dtype=torch.long, device=dev)
        logits, self._cache = self._forward(ids, self._mask, positions, self._cache, [s.adapter for s in seqs])
        self._sample(logits, seqs)

    def _sample(self, logits, seqs) -> None:
        import torch

        plain = [s.params.greedy and not s.params.penalised for s in seqs]
        # every plain greedy row in one argmax and one device->host copy, not a launch and a sync per row
        picks: list[int] = []
        if any(plain):  # -1 marks a row with non-finite scores (still one device->host copy)
            finite = torch.isfinite(logits).all(dim=-1)
            best = torch.argmax(logits, dim=-1)
            picks = torch.where(finite, best, torch.full_like(best, -1)).tolist()
        for row, seq in enumerate(seqs):
            if seq.done or seq.cancelled:
                continue
            try:  # a row whose scores or settings are broken fails alone; the batch goes on
                if plain[row]:
                    token = picks[row]
                    if token < 0:
                        raise ValueError("the model's scores for this request are not finite (NaN/inf)")
                else:
                    token = sample_row(logits[row], seq.params, seq.prompt_ids, seq.out_ids, seq.generator)
            except Exception as exc:
                self._fail(seq, exc)
                continue
            if token in self.eos_ids:
                self._finish(seq, "stop")
                continue
            seq.out_ids.append(token)
            self.stats["tokens"] += 1
            seq.emit(("token", token))
            produced = len(seq.out_ids)
            if produced >= seq.params.max_tokens or len(seq.prompt_ids) + produced >= self.max_model_len:
                self._finish(seq, "length")

    def _fail(self, seq: Sequence, exc: Exception) -> None:
        log.warning("sequence %d failed: %s: %s", seq.id, type(exc).__name__, exc)
        self.stats["errors"] += 1
        seq.done = True
        seq.emit(("error", f"{type(exc).__name__}: {exc}"))

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.done = True
        if reason == "cancelled":
            self.stats["cancelled"] += 1
        seq.emit(("done", reason))

    def _drop_finished(self) -> None:
        """Remove done/cancelled rows and trim padding columns no row needs any more."""
        import torch

        for seq in self._active:
            if seq.cancelled and not seq.done:
                self._finish(seq, "cancelled")
        keep = [i for i, s in enumerate(self._active) if not s.done]
        if len(keep) == len(self._active):
            return
        if not keep:
            self._active, self._cache, self._mask = [], None, None
            return
        index = torch.tensor(keep, dtype=torch.long, device=self._mask.device)
        self._cache.batch_select_indices(index)
        self._mask = self._mask[index]
        self._active = [self._active[i] for i in keep]
        lead = int((self._mask.sum(0) == 0).long().cumprod(0).sum())
        if lead:
            self._mask = self._mask[:, lead:]
            from swiftbox.compat import cache_drop_left

            cache_drop_left(self._cache, lead)

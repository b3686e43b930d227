"""The built-in engine: one shared transformers model, continuous (in-flight) batching, LoRA per request.

Why not transformers' own `ContinuousBatchingManager` (`init_continuous_batching` / `generate_batch`,
checked in transformers 5.23): it packs every request into one ragged row for paged attention, so
PEFT's per-row `adapter_names` cannot pick a LoRA adapter per request; it has no per-request seed,
stop strings, penalties or `n`. So this is a compact scheduler instead:

- a background thread owns the model. Each iteration it admits waiting requests into free slots, feeds
  the waiting prompts at most `prefill_chunk` tokens (chunked prefill, prefill.py: a long prompt is
  prefilled in slices between decode steps, so a burst of long prompts does not stall running streams;
  the `n` choices of one request share one prefill and join the batch as n rows), then runs ONE decode
  step for every active sequence together, on a shared left-padded `DynamicCache` with explicit
  position ids per row (and an attention mask only while some row is padded: one running sequence, or
  rows of one length, decode with none, like a plain `generate` loop);
- each row names its adapter (`adapter_names=[...]`, "__base__" for the base model), so requests for
  different adapters share a batch without touching each other's weights;
- sampling is per row: a row whose scores are not finite (or whose settings break the sampler) fails
  that request alone, and the rest of the batch goes on; so does a prompt whose own prefill fails;
  rows that ask for logprobs get them from the same scores (sampling.token_logprobs);
- finished or cancelled rows leave the batch between steps (`batch_select_indices`) and the columns
  that have become padding for every row are trimmed, so the cache never grows past the longest row.

On a CPU the engine's thread sizes torch's OpenMP pool by the thread policy (swiftbox/device/threads.py: the
cores other processes leave free, re-checked every few seconds between steps), passed in as `threads`.

Adapters are loaded and unloaded at run time between two steps, on this thread (`load_adapter` /
`unload_adapter`, registry in adapter_slots.py); an unloaded adapter's weights stay until its last sequence ends.

The waiting queue is bounded (`max_waiting`): past it `submit` raises QueueFull, which the front door
answers with 429 and Retry-After. Tokens go back to the asyncio side through `loop.call_soon_threadsafe`
(once per step); text, stop strings and SSE are handled there (builtin/backend.py), which cancels the
sequence when a stop string appears.
"""
from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from swiftbox.device.threads import ThreadGovernor
from swiftbox.serving.builtin.adapter_slots import AdapterGone, AdapterSlots
from swiftbox.serving.builtin.prefill import (
    DEFAULT_PREFILL_CHUNK,
    PrefillJob,
    packable,
    prefill_packed,
    prefill_slice,
    replicate,
    window,
)
from swiftbox.serving.builtin.sampling import SamplingParams, make_generator, sample_row, token_logprobs

log = logging.getLogger("swiftbox.serve")
BASE = "__base__"


class QueueFull(RuntimeError):
    """The waiting queue is at its bound: the request is refused (429) instead of queued without limit."""

    def __init__(self, waiting: int):
        super().__init__(f"{waiting} sequences are waiting")
        self.waiting = waiting


@dataclass
class SequenceState:
    """One generated sequence (one of a request's `n` choices): its prompt, its tokens so far, its sampling state
    and where its events go."""

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
    group: int = 0                  # sequences submitted together (the n choices of a request) share a prefill
    matcher: Any = None             # constrained.Matcher: this sequence's place in its output grammar
    prompt_logprobs: Optional[int] = None   # k: ("prompt_logprobs", entries) once the prompt is prefilled
    eos_events: bool = False        # ("eos", id) (after its logprobs, when asked) before ("done", "stop")

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

    def __init__(self, engine: BuiltinEngine, seq: SequenceState):
        self._engine, self.seq = engine, seq

    def cancel(self) -> None:
        if not self.seq.done:
            self.seq.cancelled = True
            self._engine._wake()


class BuiltinEngine:
    name = "builtin"

    def __init__(self, model, tokenizer, *, base_name: str, adapters: list[str], max_batch_size: int = 8,
                 max_model_len: int = 2048, device=None, max_waiting: int = 128,
                 prefill_chunk: int = DEFAULT_PREFILL_CHUNK, threads: Optional[ThreadGovernor] = None):
        self.model, self.tokenizer = model, tokenizer
        self.base_name = base_name
        self.slots = AdapterSlots(list(adapters))   # served adapters + loads/unloads for this thread
        self.max_batch_size, self.max_model_len = max_batch_size, max_model_len
        self.max_waiting = max_waiting
        self.prefill_chunk = max(1, int(prefill_chunk))
        self.device = device
        self.threads = threads          # the CPU thread policy (device/threads.py), applied on the engine's thread
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
        self._waiting: collections.deque[SequenceState] = collections.deque()
        self._prefilling: list[PrefillJob] = []
        self._active: list[SequenceState] = []
        self._cache: Any = None
        self._mask: Any = None          # None while no row of the batch is padded
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._groups = itertools.count(1)
        self._stop = False
        self._thread: Optional[threading.Thread] = None
        self._outbox: list = []
        self.stats = {"requests": 0, "tokens": 0, "steps": 0, "prefills": 0, "prefill_slices": 0, "cancelled": 0,
                      "errors": 0}

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
        """Queue one sequence; `sink(event)` gets ("token", id) ..., then ("done", reason) or ("error", msg);
        a sequence that asked for logprobs gets ("logprobs", (logprob, [(id, logprob), ...])) before each token."""
        return self.submit_many(prompt_ids, [params], adapter, [sink], loop)[0]

    def submit_many(self, prompt_ids: list[int], params: list[SamplingParams], adapter: Optional[str], sinks: list,
                    loop, *, prompt_logprobs: Optional[int] = None, eos_events: bool = False) -> list[Handle]:
        """Queue len(params) sequences on one prompt (a request's `n` choices): one prefill, then n rows.
        `prompt_logprobs=k`: each sequence first gets ("prompt_logprobs", [(id, (logprob, top k)), ...]) for the
        prompt's tokens after the first (prefill.prompt_entries); `max_tokens=0` then ends it ("done", "length")."""
        group = next(self._groups)
        seqs = [SequenceState(next(self._ids), list(prompt_ids), p, adapter, sink, loop,
                              generator=make_generator(p.seed), outbox=self._outbox, group=group,
                              prompt_logprobs=prompt_logprobs, eos_events=eos_events,
                              matcher=p.grammar.matcher() if p.grammar else None)
                for p, sink in zip(params, sinks, strict=True)]
        with self._cond:
            if not self.slots.usable(adapter):
                raise AdapterGone(adapter)
            if len(self._waiting) + len(seqs) > self.max_waiting:
                raise QueueFull(len(self._waiting))
            self._waiting.extend(seqs)
            self.stats["requests"] += 1
            self._cond.notify_all()
        return [Handle(self, seq) for seq in seqs]

    def load(self) -> dict:
        prefilling = sum(len(job.live) for job in self._prefilling)
        return {"active": len(self._active) + prefilling, "waiting": len(self._waiting)}

    def has_room(self, n: int) -> bool:
        """Whether `n` more sequences may wait now (the front door answers 429 otherwise)."""
        return len(self._waiting) + n <= self.max_waiting

    # -- runtime adapters (the front door's /v1/load_lora_adapter, /v1/unload_lora_adapter) --
    def adapter_id(self, name: str) -> Optional[str]:
        """The PEFT adapter serving model `name` (None: the base model); KeyError when it is not served."""
        return None if name == self.base_name else self.slots.resolve(name)

    def load_adapter(self, name: str, adapter: Any):
        """A concurrent Future, done once the engine's thread has built the checked adapter (adapter_check.py's
        CheckedAdapter) between two steps."""
        future = self.slots.request_load(name, adapter)
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
        prefilling = {s.adapter for job in self._prefilling for s in job.seqs}
        return {s.adapter for s in self._active} | {s.adapter for s in self._waiting} | prefilling

    # -- the loop ---------------------------------------------------------------------------
    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _busy(self) -> bool:
        return bool(self._waiting or self._active or self._prefilling)

    def _run(self) -> None:
        import torch

        if self.threads is not None:
            self.threads.start()
        with torch.inference_mode():
            while True:
                if self.threads is not None:
                    self.threads.tick()
                with self._cond:
                    while not self._stop and not self._busy() and not self.slots.pending():
                        self._cond.wait(timeout=1.0)
                    if self._stop:
                        break
                if self.slots.pending():
                    self._apply_adapter_changes()
                with self._cond:
                    self._admit()
                try:
                    self._drop_finished()
                    if self._prefilling:
                        self._prefill_step()
                        self._drop_finished()
                    if self._active:
                        self._decode()
                except Exception as exc:  # a failed step fails its sequences, never the server
                    log.exception("engine step failed")
                    self.stats["errors"] += 1
                    for seq in self._active + [s for job in self._prefilling for s in job.seqs]:
                        if not seq.done:
                            seq.done = True
                            seq.emit(("error", f"{type(exc).__name__}: {exc}"))
                    self._active, self._cache, self._mask, self._prefilling = [], None, None, []
                self._flush()
            for seq in list(self._active) + list(self._waiting) + [s for job in self._prefilling for s in job.seqs]:
                if not seq.done:
                    seq.done = True
                    seq.emit(("error", "server shutting down"))
            self._flush()

    def _admit(self) -> None:
        """Waiting sequences -> prefill jobs while slots are free (called holding the lock); the choices of one
        request that arrive together become one job."""
        room = self.max_batch_size - self.load()["active"]
        while room > 0 and self._waiting:
            seq = self._waiting.popleft()
            if seq.cancelled:
                self._finish(seq, "cancelled")
                continue
            last = self._prefilling[-1] if self._prefilling else None
            if last is not None and last.done == 0 and last.seqs[0].group == seq.group:
                last.seqs.append(seq)
            else:
                self._prefilling.append(PrefillJob(seq.prompt_ids, seq.adapter, [seq],
                                                   prompt_logprobs=seq.prompt_logprobs))
            room -= 1

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

    def _model(self, input_ids, mask, positions, cache, adapters, logits_to_keep: Any = 1):
        kwargs = dict(input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                      use_cache=True, logits_to_keep=logits_to_keep)
        if self.is_peft:
            kwargs["adapter_names"] = [a or BASE for a in adapters]
        out = self.model(**kwargs)
        return out.logits, out.past_key_values

    def _forward(self, input_ids, mask, positions, cache, adapters):
        logits, cache = self._model(input_ids, mask, positions, cache, adapters)
        return logits[:, -1, :], cache

    def _prefill_step(self) -> None:
        """Spend up to `prefill_chunk` prompt tokens on the waiting jobs, oldest first: fresh prompts that fit
        together go through one packed forward, a longer one gets a slice. A job whose prompt is complete
        joins the running batch and samples its first token(s) at once."""
        budget = self.prefill_chunk
        while budget > 0 and self._prefilling:
            for job in [j for j in self._prefilling if not j.live]:
                for seq in job.seqs:
                    if seq.cancelled and not seq.done:
                        self._finish(seq, "cancelled")
                self._prefilling.remove(job)
            if not self._prefilling:
                break
            pack = self._pack(budget)
            try:  # a prompt the model cannot take fails its own request(s); the running batch is untouched
                if len(pack) > 1:
                    prefill_packed(self, pack)
                    budget -= sum(len(job.prompt_ids) for job in pack)
                else:
                    pack = self._prefilling[:1]
                    budget -= prefill_slice(self, pack[0], budget)
            except Exception as exc:
                if len(pack) > 1:    # one bad prompt must not fail the others: each goes alone from now on
                    log.warning("packed prefill failed (%s: %s); prefilling those prompts one by one",
                                type(exc).__name__, exc)
                    for job in pack:
                        job.packable = False
                    continue
                for seq in pack[0].seqs:
                    if not seq.done:
                        self._fail(seq, exc)
                self._prefilling.remove(pack[0])
                continue
            self.stats["prefill_slices"] += 1
            for job in pack:
                if not job.remaining:
                    self._join(job)
            self._flush()             # first tokens go out now, not after the other prompts

    def _pack(self, budget: int) -> list[PrefillJob]:
        """The leading fresh jobs (same adapter) whose whole prompts fit in `budget`, if packing is possible."""
        if not packable(self.model):
            return []
        limit = window(self.model)
        pack: list[PrefillJob] = []
        for job in self._prefilling:
            n = len(job.prompt_ids)
            if (job.done or not job.packable or n > budget or (limit and n > limit)
                    or (pack and job.adapter != pack[0].adapter)):
                break
            pack.append(job)
            budget -= n
        return pack

    def _join(self, job: PrefillJob) -> None:
        """A fully prefilled prompt: its live sequences join the running batch and sample their first token."""
        self._prefilling.remove(job)
        self.stats["prefills"] += 1
        seqs = job.live
        for seq in job.seqs:
            if seq.cancelled and not seq.done:
                self._finish(seq, "cancelled")
        for seq in seqs:
            if job.prompt_logprobs is not None:
                seq.emit(("prompt_logprobs", job.prompt_lp))
            if seq.params.max_tokens <= 0:   # the prompt's log-probabilities only
                self._finish(seq, "length")
        seqs = [seq for seq in seqs if not seq.done]
        if seqs:
            self._merge(replicate(job.cache, len(seqs)), len(job.prompt_ids), seqs)
            self._sample(job.logits.expand(len(seqs), -1), seqs)
        job.cache = job.logits = None

    def _cache_len(self) -> int:
        return int(self._cache.get_seq_length())

    def _merge(self, cache, length: int, seqs) -> None:
        """Append rows (their unpadded cache of `length` positions) to the running batch, left-padding to a
        common length."""
        import torch
        import torch.nn.functional as F

        from swiftbox.compat import cache_from_layers, cache_layers

        if self._cache is None or not self._active:
            self._cache, self._mask, self._active = cache, None, list(seqs)
            return
        old_t = self._cache_len()
        t = max(old_t, length)
        if old_t != length or self._mask is not None:
            old_mask = self._mask if self._mask is not None else torch.ones(
                (len(self._active), old_t), dtype=torch.long, device=self.device)
            new_mask = torch.ones((len(seqs), length), dtype=torch.long, device=self.device)
            self._mask = torch.cat([F.pad(old_mask, (t - old_t, 0)), F.pad(new_mask, (t - length, 0))])
        layers = []
        for (old_k, old_v), (new_k, new_v) in zip(cache_layers(self._cache), cache_layers(cache), strict=True):
            k = torch.cat([F.pad(old_k, (0, 0, t - old_t, 0)), F.pad(new_k, (0, 0, t - length, 0))])
            v = torch.cat([F.pad(old_v, (0, 0, t - old_t, 0)), F.pad(new_v, (0, 0, t - length, 0))])
            layers.append((k, v))
        self._cache = cache_from_layers(layers)
        self._active.extend(seqs)

    def _decode(self) -> None:
        import torch

        self.stats["steps"] += 1
        dev = self.device
        seqs = self._active
        if len(seqs) == 1:   # one stream: no Python lists of lists, no mask (like a plain generate loop)
            seq = seqs[0]
            ids = torch.tensor([[seq.out_ids[-1]]], dtype=torch.long, device=dev)
            positions = torch.tensor([[seq.pos]], dtype=torch.long, device=dev)
        else:
            ids = torch.tensor([[s.out_ids[-1]] for s in seqs], dtype=torch.long, device=dev)
            positions = torch.tensor([[s.pos] for s in seqs], dtype=torch.long, device=dev)
        if self._mask is not None:
            ones = torch.ones((len(seqs), 1), dtype=self._mask.dtype, device=dev)
            self._mask = torch.cat([self._mask, ones], dim=1)
        logits, self._cache = self._forward(ids, self._mask, positions, self._cache, [s.adapter for s in seqs])
        self._sample(logits, seqs)

    def _pick(self, logits, seqs) -> list[Optional[int]]:
        """The next token of every row (None: the row is finished or has just failed)."""
        import torch

        plain = [s.params.greedy and not s.params.shaped for s in seqs]
        # every plain greedy row in one argmax and one device->host copy, not a launch and a sync per row;
        # a row whose best score is not finite (NaN wins argmax) is marked -1
        picks: list[int] = []
        if any(plain):
            best = torch.argmax(logits, dim=-1)
            finite = torch.isfinite(logits.gather(1, best.unsqueeze(1)).squeeze(1))
            picks = torch.where(finite, best, torch.full_like(best, -1)).tolist()
        out: list[Optional[int]] = []
        for row, seq in enumerate(seqs):
            token: Optional[int] = None
            if not (seq.done or seq.cancelled):
                try:  # a row whose scores or settings are broken fails alone; the batch goes on
                    if plain[row]:
                        token = picks[row]
                        if token < 0:
                            raise ValueError("the model's scores for this request are not finite (NaN/inf)")
                    else:
                        token = sample_row(logits[row], seq.params, seq.prompt_ids, seq.out_ids, seq.generator,
                                           seq.matcher)
                except Exception as exc:
                    self._fail(seq, exc)
                    token = None
            out.append(token)
        return out

    def _sample(self, logits, seqs) -> None:
        picks = self._pick(logits, seqs)
        want, chosen = [], []
        for r, (s, token) in enumerate(zip(seqs, picks, strict=True)):
            if token is not None and (s.eos_events or token not in self.eos_ids) and s.params.logprobs is not None:
                want.append(r)
                chosen.append(token)
        info = {}
        if want:
            found = token_logprobs(logits, want, chosen, [seqs[r].params.logprobs or 0 for r in want])
            info = dict(zip(want, found, strict=True))
        for row, seq in enumerate(seqs):
            token = picks[row]
            if token is None:
                continue
            if token in self.eos_ids:
                if seq.eos_events:
                    if row in info:
                        seq.emit(("logprobs", info[row]))
                    seq.emit(("eos", token))
                self._finish(seq, "stop")
                continue
            try:        # the output grammar takes the token; once it is complete the answer ends there
                complete = seq.matcher is not None and seq.matcher.advance(token)
            except ValueError as exc:
                self._fail(seq, exc)
                continue
            seq.out_ids.append(token)
            self.stats["tokens"] += 1
            if row in info:
                seq.emit(("logprobs", info[row]))
            seq.emit(("token", token))
            produced = len(seq.out_ids)
            if produced >= seq.params.max_tokens or len(seq.prompt_ids) + produced >= self.max_model_len:
                self._finish(seq, "length")
            elif complete:
                self._finish(seq, "stop")

    def _fail(self, seq: SequenceState, exc: Exception) -> None:
        log.warning("sequence %d failed: %s: %s", seq.id, type(exc).__name__, exc)
        self.stats["errors"] += 1
        seq.done = True
        seq.emit(("error", f"{type(exc).__name__}: {exc}"))

    def _finish(self, seq: SequenceState, reason: str) -> None:
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
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self._cache.batch_select_indices(index)
        self._active = [self._active[i] for i in keep]
        if self._mask is None:
            return
        self._mask = self._mask[index]
        lead = int((self._mask.sum(0) == 0).long().cumprod(0).sum())
        if lead:
            self._mask = self._mask[:, lead:]
            from swiftbox.compat import cache_drop_left

            cache_drop_left(self._cache, lead)
        if bool(self._mask.all()):
            self._mask = None

"""Which LoRA adapters the built-in engine serves, and the loads/unloads waiting for the engine's thread.

The model is only ever changed on the engine's own thread, between steps (`apply`), so no forward pass sees
an adapter half-loaded. Each adapter gets its own PEFT name (`swiftbox_lora_N`), separate from the name
clients use, so a name can be unloaded and loaded again while requests on the old weights still run:

- load: the name is reserved at once (a second load of it is refused), PEFT's `load_adapter` runs on the
  engine's thread; the name is served only once its weights are in.
- unload: the name stops being served at once (new requests get 404); the weights are deleted once no
  running or waiting sequence uses them, so requests in flight finish on the adapter they started with.
"""
from __future__ import annotations

import collections
import itertools
import logging
import threading
from concurrent.futures import Future
from typing import Any, Optional

log = logging.getLogger("swiftbox.serve")


class AdapterGone(KeyError):
    """The adapter a request was resolved to has been unloaded meanwhile."""


class AdapterLoadError(ValueError):
    """PEFT could not load the adapter onto this model (the model is left as it was)."""


class AdapterSlots:
    def __init__(self, static: list[str]):
        self._lock = threading.Lock()
        self._served: dict[str, str] = {name: name for name in static}   # client name -> PEFT adapter name
        self._loaded: set[str] = set(static)                             # PEFT adapter names in the model
        self._doomed: set[str] = set()                                   # unloaded, deleted once unused
        self._reserved: set[str] = set()                                 # client names being loaded
        self._loads: collections.deque[tuple[str, str, str, Future]] = collections.deque()
        self._ids = itertools.count(1)

    # -- any thread -------------------------------------------------------------------------
    def names(self) -> list[str]:
        with self._lock:
            return list(self._served)

    def resolve(self, name: str) -> str:
        """The PEFT adapter name serving `name` (KeyError: not served)."""
        with self._lock:
            return self._served[name]

    def usable(self, adapter: Optional[str]) -> bool:
        with self._lock:
            return adapter is None or adapter in self._loaded

    def taken(self, name: str) -> bool:
        with self._lock:
            return name in self._served or name in self._reserved

    def request_load(self, name: str, path: str) -> Future:
        """Queue a load; the future ends when the engine's thread has loaded it (or raises AdapterLoadError)."""
        future: Future = Future()
        with self._lock:
            if name in self._served or name in self._reserved:
                raise ValueError(f"the lora adapter '{name}' has already been loaded")
            self._reserved.add(name)
            self._loads.append((name, f"swiftbox_lora_{next(self._ids)}", path, future))
        return future

    def request_unload(self, name: str) -> None:
        """Stop serving `name` now; its weights go once no sequence uses them (KeyError: not served)."""
        with self._lock:
            self._doomed.add(self._served.pop(name))

    def pending(self) -> bool:
        return bool(self._loads or self._doomed)

    # -- the engine's thread, between steps -------------------------------------------------
    def retire(self, in_use: set) -> list[str]:
        """Unloaded adapters no sequence uses any more: from now on `usable` says no. The engine calls this
        under the same lock its `submit` holds, so no sequence can join them in between."""
        with self._lock:
            free = [a for a in self._doomed if a not in in_use]
            self._doomed.difference_update(free)
            self._loaded.difference_update(free)
        return free

    def apply(self, model: Any, free: list[str]) -> Any:
        """Delete the retired adapters and run queued loads; returns the model (wrapped or unwrapped by PEFT
        when the first adapter arrives or the last one goes). Never raises: a failed load fails its future."""
        for adapter in free:
            model = _delete(model, adapter)
            log.info("lora adapter %s deleted", adapter)
        while True:
            with self._lock:
                if not self._loads:
                    break
                name, adapter, path, future = self._loads.popleft()
            try:
                model = _load(model, adapter, path)
            except Exception as exc:  # noqa: BLE001 - PEFT/torch raise many types; the model is restored
                with self._lock:
                    self._reserved.discard(name)
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                future.set_exception(AdapterLoadError(f"PEFT cannot load it onto this model: {first[:300]}"))
                continue
            with self._lock:
                self._reserved.discard(name)
                self._loaded.add(adapter)
                self._served[name] = adapter
            log.info("lora adapter %s loaded as %s from %s", name, adapter, path)
            future.set_result(None)
        return model


def _load(model: Any, adapter: str, path: str) -> Any:
    from peft import PeftConfig, PeftModel

    if hasattr(model, "peft_config"):
        try:
            model.load_adapter(path, adapter_name=adapter)
        except Exception:
            if adapter in model.peft_config:
                model.delete_adapter(adapter)
            raise
        model.eval()
        return model
    # a plain model: wrap it first, so a failed load can be undone with unload() (from_pretrained would leave
    # the injected layers behind in the caller's model)
    config = PeftConfig.from_pretrained(path)
    wrapped = PeftModel(model, config, adapter_name=adapter)
    try:
        wrapped.load_adapter(path, adapter_name=adapter)
    except Exception:
        wrapped.unload()
        raise
    wrapped.eval()  # LoRA dropout off
    return wrapped


def _delete(model: Any, adapter: str) -> Any:
    if adapter not in getattr(model, "peft_config", {}):
        return model
    if len(model.peft_config) == 1:  # PEFT keeps pointing at a deleted last adapter: go back to the plain model
        return model.unload()
    model.delete_adapter(adapter)
    return model

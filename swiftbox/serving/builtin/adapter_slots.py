"""Which LoRA adapters the built-in engine serves, and the loads/unloads waiting for the engine's thread.

The model is only ever changed on the engine's own thread, between steps (`apply`), so no forward pass sees
an adapter half-loaded. Each adapter gets its own PEFT name (`swiftbox_lora_N`), separate from the name
clients use, so a name can be unloaded and loaded again while requests on the old weights still run:

- load: the name is reserved at once (a second load of it is refused); on the engine's thread PEFT adds a LoRA
  adapter built from the checked options and fills it with the checked tensors (adapter_check.py's
  CheckedAdapter: never the files again, no initialisation that reads the base, no key that is not the new
  adapter's own LoRA matrix); the name is served only once its weights are in. A failed load is undone.
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
        self._loads: collections.deque[tuple[str, str, Any, Future]] = collections.deque()
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

    def request_load(self, name: str, checked: Any) -> Future:
        """Queue a load of a CheckedAdapter; the future ends when the engine's thread has loaded it (or raises
        AdapterLoadError)."""
        future: Future = Future()
        with self._lock:
            if name in self._served or name in self._reserved:
                raise ValueError(f"the lora adapter '{name}' has already been loaded")
            self._reserved.add(name)
            self._loads.append((name, f"swiftbox_lora_{next(self._ids)}", checked, future))
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
                name, adapter, checked, future = self._loads.popleft()
            try:
                model = _load(model, adapter, checked)
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
            log.info("lora adapter %s loaded as %s from %s", name, adapter, checked.path)
            future.set_result(None)
        return model


def _load(model: Any, adapter: str, checked: Any) -> Any:
    """`model` with `checked` added as PEFT adapter `adapter`: a LoRA built from the checked options (plain
    initialisation, overwritten at once), its matrices set from the checked tensors. Only keys of the new adapter's
    own LoRA matrices may load: a missing or unexpected one undoes the load, so the model is left as it was."""
    from peft import LoraConfig, PeftModel, set_peft_model_state_dict

    config = LoraConfig(**checked.options)
    wrapped = hasattr(model, "peft_config")
    try:
        if wrapped:
            model.add_adapter(adapter, config)
            peft = model
        else:   # a plain model: wrap it, so a failed load can be undone with unload()
            peft = PeftModel(model, config, adapter_name=adapter)
    except Exception:
        if wrapped and adapter in model.peft_config:
            model.delete_adapter(adapter)
        elif not wrapped:
            _strip_lora(model)      # layers injected before PEFT gave up
        raise
    try:
        result = set_peft_model_state_dict(peft, checked.tensors, adapter_name=adapter)
        missing = [k for k in result.missing_keys if "lora_" in k and f".{adapter}" in k]
        unexpected = list(result.unexpected_keys)
        if missing or unexpected:
            raise ValueError("the weights do not fit the adapter's modules (" +
                             (f"no tensor for {missing[0]}" if missing else f"unexpected {unexpected[0]}") + ")")
    except Exception:
        if wrapped:
            model.delete_adapter(adapter)
        else:
            peft.unload()
        raise
    peft.eval()  # LoRA dropout off
    return peft


def _strip_lora(model: Any) -> None:
    """Put every LoRA layer's base layer back in its place (what PEFT injected before a failed wrap)."""
    from peft.tuners.lora import LoraLayer

    for name, module in list(model.named_modules()):
        if isinstance(module, LoraLayer) and name:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, module.get_base_layer())


def _delete(model: Any, adapter: str) -> Any:
    if adapter not in getattr(model, "peft_config", {}):
        return model
    if len(model.peft_config) == 1:  # PEFT keeps pointing at a deleted last adapter: go back to the plain model
        return model.unload()
    model.delete_adapter(adapter)
    return model

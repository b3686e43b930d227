"""Every place swiftbox reaches into a library's internals, in one file.

Each entry names the private symbol it touches and the version it was checked against
(`CHECKED_AGAINST`); patches are scoped (a context manager restores the original), and
tests/test_compat.py has one test per symbol that fails loudly when a library renames or moves it.
Nothing here imports a library at module import time.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Any, Iterator

CHECKED_AGAINST = {
    "trl": "1.16.0",             # trl.trainer.utils._use_triton; trl.experimental.orpo / .cpo trainers
    "gptqmodel": "7.6.0",        # gptqmodel.looper.loop_processor._PROJECT_LOG_DIR
    "uvicorn": "0.54.0",         # uvicorn.Server.capture_signals
    "transformers": "5.23.0",    # DynamicCache(ddp_cache_data=...), DynamicCache.layers[i].keys / .values
    "llama-cpp-python": "0.3.36",  # its llama.cpp tree: conversion.base.TextModel.get_vocab_base_pre
}


# -- TRL: score only the label positions in the fused LM-head loss ----------------------------------------
@contextlib.contextmanager
def trl_scores_label_positions_only() -> Iterator[None]:
    """TRL's fused LM head scores only the positions that carry a label (assistant tokens) on Triton devices,
    and every position elsewhere (a recompilation concern of Neuron devices, not of CPU/NPU eager mode).
    Prompt tokens make up much of chat SFT data, so while this is active TRL scores only labelled positions
    everywhere: same loss, less LM-head work. The decision is the module-level probe
    `trl.trainer.utils._use_triton(device)`, replaced for the duration and restored after."""
    import trl.trainer.utils as trl_utils

    original = trl_utils._use_triton

    def compact(device: Any) -> bool:
        return True

    trl_utils._use_triton = compact
    try:
        yield
    finally:
        trl_utils._use_triton = original


# -- TRL: trainers that live only in trl.experimental ------------------------------------------------------
TRL_EXPERIMENTAL = {"orpo": ("trl.experimental.orpo", "ORPOConfig", "ORPOTrainer"),
                    "cpo": ("trl.experimental.cpo", "CPOConfig", "CPOTrainer")}


def trl_experimental(name: str) -> tuple[Any, Any]:
    """(Config, Trainer) classes of a TRL trainer that has no stable home yet (ORPO; CPO, which runs SimPO).
    The one place that names their module: when TRL moves them, this line and its test break, nothing else."""
    import importlib

    from swiftbox.errors import SwiftboxError

    module, config, trainer = TRL_EXPERIMENTAL[name]
    try:
        found = importlib.import_module(module)
        return getattr(found, config), getattr(found, trainer)
    except (ImportError, AttributeError) as exc:
        import trl

        raise SwiftboxError(f"TRL {trl.__version__} has no {module}.{trainer} (swiftbox was checked against TRL "
                            f"{CHECKED_AGAINST['trl']}): {exc}") from None


# -- gptqmodel: its per-layer log goes into the step's output, not ./logs ----------------------------------
@contextlib.contextmanager
def gptqmodel_log_dir(folder: Path) -> Iterator[None]:
    """gptqmodel writes a per-layer log to ./logs/ of the current directory; keep it in `folder` instead."""
    from gptqmodel.looper import loop_processor

    before = loop_processor._PROJECT_LOG_DIR
    loop_processor._PROJECT_LOG_DIR = folder
    try:
        yield
    finally:
        loop_processor._PROJECT_LOG_DIR = before


# -- uvicorn: a foreground server that ends normally on Ctrl-C / SIGTERM ------------------------------------
def uvicorn_server(config: Any) -> Any:
    """A `uvicorn.Server` whose `capture_signals` restores the previous handlers instead of re-raising the
    signal after shutdown (uvicorn would end the process by it; a serve step asked to stop has succeeded, so
    the runner can write its manifest and exit 0). Off the main thread it installs no handlers at all."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server(config)


# -- transformers: the per-layer tensors of a DynamicCache --------------------------------------------------
def cache_layers(cache: Any) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a `transformers.DynamicCache`, shape [batch, heads, time, head_dim]."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def cache_from_layers(layers: list[tuple[Any, Any]]) -> Any:
    """A `DynamicCache` holding the given (keys, values) per layer."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=layers)


# -- gptqmodel: environment it needs before import -----------------------------------------------------------
def gptqmodel_env() -> None:
    """gptqmodel crashes in quantize() on <=2 cores without an explicit worker count (checked 7.6.0); call
    before importing gptqmodel. A value the user set wins."""
    import os

    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")


def cache_drop_left(cache: Any, n: int) -> None:
    """Drop the first `n` time steps of every layer of a `DynamicCache`, in place (left padding no row needs)."""
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, n:, :]
        layer.values = layer.values[:, :, n:, :]


# -- llama.cpp's converter: the BPE pre-tokenizer of a tokenizer it does not know ---------------------------
@contextlib.contextmanager
def llamacpp_bpe_pre_tokenizer(name: str | None) -> Iterator[None]:
    """llama.cpp's convert_hf_to_gguf.py names a BPE tokenizer's pre-tokenizer (`tokenizer.ggml.pre`) by hashing
    how it encodes a test string, and stops with NotImplementedError on a hash it does not list - any tokenizer
    trained from scratch, such as the toy's. When swiftbox has identified the pre-tokenizer from tokenizer.json
    itself (`name`, from swiftbox.llamacpp.convert.pre_tokenizer_of), `conversion.base.TextModel.
    get_vocab_base_pre` answers `name` where the original raises; a recognised hash still wins. Runs inside the
    converter's child process (swiftbox.llamacpp.driver) with the llama.cpp tree on sys.path; checked against
    llama-cpp-python 0.3.36's tree. The export then proves the choice: llama.cpp must tokenize the held-out text
    to exactly the ids transformers does."""
    if name is None:
        yield
        return
    from conversion.base import TextModel  # llama.cpp's converter package (from its tree)

    original = TextModel.get_vocab_base_pre

    def identified(self: Any, tokenizer: Any) -> str:
        try:
            return original(self, tokenizer)
        except NotImplementedError:
            return name

    TextModel.get_vocab_base_pre = identified
    try:
        yield
    finally:
        TextModel.get_vocab_base_pre = original

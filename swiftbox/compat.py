"""Every place swiftbox reaches into a library's internals, in one file.

Each entry names the private symbol it touches and the version it was checked against
(`CHECKED_AGAINST`); patches are scoped (a context manager restores the original), and
tests/unit/test_compat.py has one test per symbol that fails loudly when a library renames or moves it.
Nothing here imports a library at module import time.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

CHECKED_AGAINST = {
    "peft": "0.21.2",            # tuners.lora.layer.Linear: base_layer, lora_A / lora_B / lora_dropout /
                                 # lora_variant ModuleDicts, scaling, merged, disable_adapters, active_adapters
                                 # and its forward's sum (tests/unit/test_lora_fused.py)
    "trl": "1.16.0",             # trl.trainer.utils._use_triton; trl.experimental.orpo / .cpo / .gkd trainers;
                                 # kernels.chunked_logprob.TOKEN_CHUNK_SIZE, trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE
                                 # (tests/unit/test_chunked_loss.py);
                                 # DPOTrainer / KTOTrainer._prepare_dataset, KTOTrainer.calculate_KL;
                                 # trainer.utils._ChunkedLogProbFunction (the fused head's function: apply's
                                 # arguments, ctx.saved_tensors / kernel_args of its backward; test_lm_head.py);
                                 # orpo_trainer / cpo_trainer add_bos_token_if_needed, add_eos_token_if_needed
    "gptqmodel": "7.6.0",        # loop_processor._PROJECT_LOG_DIR; the looper's `layer_callback` model attribute
    "uvicorn": "0.54.0",         # uvicorn.Server.capture_signals
    "transformers": "5.23.0",    # DynamicCache(ddp_cache_data=...), DynamicCache.layers[i].keys / .values;
                                 # 5.24.0: integrations.gguf (is_gguf_arch_supported, dequant.GGML_NAME),
                                 # modeling_gguf_pytorch_utils.GGUF_SUPPORTED_ARCHITECTURES,
                                 # chat_template_utils._compile_jinja_template (its Template's environment.concat;
                                 # lru-cached) and .ImmutableSandboxedEnvironment (the class it compiles them in);
                                 # the hybrid mixer classes' forward(hidden_states, cache, attention_mask, **kw)
    "lm_eval": "0.4.13",         # lm_eval.tasks._yaml_loader.load_yaml (a registered task's full config)
    "gguf": "0.19.0",            # gguf.quants._type_traits (the types its numpy dequantize() handles)
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


# -- TRL: the fused LM head's tiles sized for memory -------------------------------------------------------
# TRL's chunked log-prob function projects [4096 tokens x 32768 vocabulary columns] tiles in fp32 (512 MB each, and
# its softmax temporaries beside them): on a 49k vocabulary that is 2/3 of the full logits at once. Smaller tiles
# keep the same loss (the log-sum-exp is folded tile by tile either way; tests/unit/test_chunked_loss.py).
LM_HEAD_TILE = {"tokens": 1024, "vocab": 8192}


@contextlib.contextmanager
def trl_lm_head_tiles(tokens: int = LM_HEAD_TILE["tokens"], vocab: int = LM_HEAD_TILE["vocab"]) -> Iterator[None]:
    """While active, TRL's fused LM head works on [tokens x vocab] tiles: `trl.kernels.chunked_logprob.
    TOKEN_CHUNK_SIZE` (read per call) and `trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE` (the vocabulary chunk the
    fused forward passes), replaced for the duration and restored after."""
    import trl.kernels.chunked_logprob as kernel
    import trl.trainer.utils as trl_utils

    saved = kernel.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE
    kernel.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = tokens, vocab
    try:
        yield
    finally:
        kernel.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = saved


# -- TRL: the fused LM head's folding on devices without Triton --------------------------------------------
@contextlib.contextmanager
def trl_lm_head_folded(function: Any) -> Iterator[None]:
    """While active, TRL's fused LM head (`trl.trainer.utils._ChunkedLogProbFunction`, the name
    `add_fused_lm_head`'s forward calls) runs `function` (swiftbox.training.lm_head.FoldedLogProb: the same
    signature and outputs, the hidden-state gradient folded in the forward) where that is exact: no Triton device
    (`trl.kernels.chunked_logprob._use_triton`, not the trainer module's probe that
    trl_scores_label_positions_only replaces: TRL's kernels run there), no final-logit soft-capping, a head whose
    weight and bias get no gradient. Every other call goes to TRL's own function. Restored after."""
    import trl.kernels.chunked_logprob as kernel
    import trl.trainer.utils as trl_utils

    original = trl_utils._ChunkedLogProbFunction

    class Dispatch:
        @staticmethod
        def apply(hidden: Any, weight: Any, bias: Any, targets: Any, temperature: float, chunk_size: int,
                  final_logit_softcapping: float | None = None, logit_scale: float = 1.0,
                  outputs: tuple[str, ...] = ("log_probs",)) -> Any:
            folded = (not kernel._use_triton(hidden.device) and final_logit_softcapping is None
                      and not weight.requires_grad and (bias is None or not bias.requires_grad))
            chosen = function if folded else original
            return chosen.apply(hidden, weight, bias, targets, temperature, chunk_size, final_logit_softcapping,
                                logit_scale, outputs)

    trl_utils._ChunkedLogProbFunction = Dispatch
    try:
        yield
    finally:
        trl_utils._ChunkedLogProbFunction = original


# -- PEFT: each LoRA layer in one call (GEMMs only, the dropout as the positions it drops) -----------------
@contextlib.contextmanager
def peft_lora_fused(model: Any, lora_linear: Callable[..., Any]) -> Iterator[int]:
    """While active, every vanilla LoRA Linear layer (`peft.tuners.lora.layer.Linear` over an `nn.Linear`, no DoRA
    or other variant, A and B without bias, dropout an `nn.Dropout` below 0.5 or none) computes
    `base(x) + lora_B(lora_A(dropout(x))) * scaling` in one call, `lora_linear(x, W, b, A, B, scaling, p)`
    (swiftbox.training.lora_fused: GEMMs only, the dropout drawn as the positions it drops). Each such layer gets an
    instance `forward` that checks PEFT's state on every call and runs PEFT's own forward whenever it is not the plain
    case: adapters disabled or merged, several or other active adapters, per-call arguments (`adapter_names`), a
    trainable base weight or bias, or an input not in the adapter's dtype outside autocast. Yields how many LoRA
    Linear layers got the forward; removes it after (no parameters change: the saved adapter is the same)."""
    import torch
    from peft.tuners.lora.layer import Linear

    def plain(layer: Any, x: Any, args: tuple, kwargs: dict) -> Any:
        if args or kwargs or layer.disable_adapters or layer.merged or len(layer.active_adapters) != 1:
            return None
        name = layer.active_adapters[0]
        if name not in layer.lora_A or name in layer.lora_variant:
            return None
        base, lora_a, lora_b, drop = layer.base_layer, layer.lora_A[name], layer.lora_B[name], layer.lora_dropout[name]
        if (type(base) is not torch.nn.Linear or base.weight.requires_grad
                or (base.bias is not None and base.bias.requires_grad)):
            return None
        if type(lora_a) is not torch.nn.Linear or type(lora_b) is not torch.nn.Linear or lora_a.bias is not None \
                or lora_b.bias is not None:
            return None
        if isinstance(drop, torch.nn.Dropout):
            p = drop.p if drop.training else 0.0
        elif isinstance(drop, torch.nn.Identity):
            p = 0.0
        else:
            return None
        if p >= 0.5 or (x.dtype != lora_a.weight.dtype and not torch.is_autocast_enabled(x.device.type)):
            return None
        return lora_linear(x, base.weight, base.bias, lora_a.weight, lora_b.weight, layer.scaling[name], p)

    def fused_forward(layer: Any) -> Any:
        def forward(x: Any, *args: Any, **kwargs: Any) -> Any:
            out = plain(layer, x, args, kwargs)
            return Linear.forward(layer, x, *args, **kwargs) if out is None else out

        return forward

    done = [layer for layer in model.modules() if type(layer) is Linear]
    for layer in done:
        layer.forward = fused_forward(layer)
    try:
        yield len(done)
    finally:
        for layer in done:
            del layer.forward


# -- TRL: preference data tokenized by swiftbox, not re-tokenized by the trainer -----------------------------
PRETOKENIZED = {"dpo": ("prompt_ids", "chosen_ids", "rejected_ids"), "kto": ("prompt_ids", "completion_ids")}


@contextlib.contextmanager
def trl_pretokenized(trainer_cls: Any) -> Iterator[None]:
    """While active, DPOTrainer / KTOTrainer take a dataset that already holds their token columns
    (`PRETOKENIZED`) as it is. Their own preparation appends `eos_token` to every plain-text completion that
    does not end with it (one token more than the template's reply on Gemma, Phi-3.5, GLM: their end of turn is
    not the eos) and re-tokenizes the prompt with the tokenizer's special tokens (a second BOS on Llama 3).
    swiftbox's columns hold exactly the template's generation prompt and replies. `_prepare_dataset(self,
    dataset, processing_class, args, dataset_name)` is replaced on the class for the duration and restored after;
    KTO's mismatched "KL" completions are built as TRL builds them (rotated by one within each batch)."""
    original = trainer_cls._prepare_dataset

    def prepare(self: Any, dataset: Any, processing_class: Any, args: Any, dataset_name: str) -> Any:
        if "prompt_ids" not in getattr(dataset, "column_names", ()):
            return original(self, dataset, processing_class, args, dataset_name)
        if getattr(self, "calculate_KL", False) and "KL_completion_ids" not in dataset.column_names:
            def rotate(batch: dict) -> dict:
                batch["KL_completion_ids"] = [batch["completion_ids"][-1]] + batch["completion_ids"][:-1]
                return batch

            dataset = dataset.map(rotate, batched=True, batch_size=args.per_device_train_batch_size)
        return dataset

    trainer_cls._prepare_dataset = prepare
    try:
        yield
    finally:
        trainer_cls._prepare_dataset = original


# -- TRL: trainers that live only in trl.experimental ------------------------------------------------------
TRL_EXPERIMENTAL = {"orpo": ("trl.experimental.orpo", "ORPOConfig", "ORPOTrainer"),
                    "cpo": ("trl.experimental.cpo", "CPOConfig", "CPOTrainer"),
                    "gkd": ("trl.experimental.gkd", "GKDConfig", "GKDTrainer")}


def trl_experimental(name: str) -> tuple[Any, Any]:
    """(Config, Trainer) classes of a TRL trainer that has no stable home yet (ORPO; CPO, which runs SimPO; GKD).
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


@contextlib.contextmanager
def trl_experimental_as_given(name: str) -> Iterator[None]:
    """While active, ORPO's / CPO's (SimPO's) row tokenizer keeps swiftbox's split as it is: no eos appended after
    a reply whose end-of-turn marker is another token, no BOS put before a prompt the template renders without
    one. Their module globals `add_eos_token_if_needed` / `add_bos_token_if_needed` are replaced by pass-throughs
    for the duration (trainer construction, where the dataset is tokenized) and restored after."""
    import importlib

    module = importlib.import_module(f"{TRL_EXPERIMENTAL[name][0]}.{name}_trainer")
    saved = {k: getattr(module, k) for k in ("add_eos_token_if_needed", "add_bos_token_if_needed")}

    def keep_eos(eos_token_id: Any, chosen: Any, rejected: Any) -> tuple[Any, Any]:
        return chosen, rejected

    def keep_bos(bos_token_id: Any, prompt_len: Any, prompt: Any, chosen_len: Any, chosen: Any, rejected_len: Any,
                 rejected: Any) -> tuple[Any, Any, Any]:
        return prompt, chosen, rejected

    setattr(module, "add_eos_token_if_needed", keep_eos)      # noqa: B010 - module globals, typed by the library
    setattr(module, "add_bos_token_if_needed", keep_bos)      # noqa: B010
    try:
        yield
    finally:
        for key, value in saved.items():
            setattr(module, key, value)


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


# -- gptqmodel: one call per quantized layer, for swiftbox's own progress ----------------------------------
class _LayerReporter:
    """What gptqmodel's ModuleLooper calls: `layer_complete(layer_idx=, submodule_finalized=)`, twice per layer
    (quantized, then finalized); `on_layer(layer_idx)` runs once, on the second."""

    def __init__(self, on_layer: Callable[[int], None]) -> None:
        self.on_layer = on_layer

    def layer_complete(self, *, layer_idx: int, submodule_finalized: bool) -> None:
        if submodule_finalized:
            self.on_layer(layer_idx)


@contextlib.contextmanager
def gptqmodel_layer_callback(model: Any, on_layer: Callable[[int], None]) -> Iterator[None]:
    """gptqmodel has no documented progress hook; its ModuleLooper reads a `layer_callback` attribute of the
    model it quantizes (checked 7.6.0: `getattr(model, "layer_callback", None)` in `ModuleLooper.__init__`) and
    calls it as each decoder layer is done. Set for the duration of `model.quantize(...)`, removed after."""
    had = "layer_callback" in vars(model)
    before = vars(model).get("layer_callback")
    model.layer_callback = _LayerReporter(on_layer)
    try:
        yield
    finally:
        if had:
            model.layer_callback = before
        else:
            del model.layer_callback


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


# -- lm-evaluation-harness: a registered task's full config, to re-point its data at local files ------------
def lm_eval_task_config(task_manager: Any, name: str) -> dict[str, Any]:
    """The full config (includes resolved, `!function` hooks loaded) of the lm-eval task `name`, as the harness
    itself builds it from its YAML. An inline dict given to lm-eval replaces a registered config instead of
    updating it, so swiftbox starts from this and changes only where the data comes from. The YAML loader is
    private (`lm_eval.tasks._yaml_loader.load_yaml`); the registry is public (`TaskManager.task_index`)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    from swiftbox.errors import SwiftboxError

    entry = task_manager.task_index.get(name)
    if entry is None or not getattr(entry, "yaml_path", None):
        raise SwiftboxError(f"lm-eval has no task {name!r} with a YAML config (checked against lm-eval "
                            f"{CHECKED_AGAINST['lm_eval']})")
    return dict(load_yaml(entry.yaml_path, resolve_func=True))


# -- transformers + gguf: which GGUF files transformers can turn back into float weights ---------------------
GGUF_FLOAT_TYPES = ("F32", "F16")


def gguf_architectures() -> set[str]:
    """GGUF `general.architecture` values transformers' `from_pretrained(..., gguf_file=...)` loads: the legacy
    loader's list (modeling_gguf_pytorch_utils) plus the architectures of its newer loader (integrations.gguf)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    names = set(GGUF_SUPPORTED_ARCHITECTURES)
    try:
        from transformers.integrations.gguf.gguf_conversion_mapping import GGUF_ARCHS
    except ImportError:   # transformers before the newer loader
        return names
    return names | set(GGUF_ARCHS)


def gguf_dequantizable_types(architecture: str) -> set[str]:
    """GGML tensor type names transformers can dequantize in a GGUF of `architecture`.

    transformers has two loaders: architectures its newer one handles (`integrations.gguf`, torch kernels in
    `dequant.py`) take F32/F16/BF16 and the block types of `dequant.GGML_NAME`; every other architecture goes
    through the legacy loader, which calls gguf-py's `dequantize()`: F32, F16 and the types with an entry in
    `gguf.quants._type_traits` (a private table; there is no public list)."""
    newer = False
    try:
        from transformers.integrations.gguf import is_gguf_arch_supported
        from transformers.integrations.gguf.dequant import GGML_NAME

        newer = bool(is_gguf_arch_supported(architecture))
    except ImportError:
        pass
    if newer:
        return {*GGUF_FLOAT_TYPES, "BF16", *GGML_NAME.values()}
    from gguf import quants

    return {*GGUF_FLOAT_TYPES, *(qtype.name for qtype in quants._type_traits)}


# -- llama.cpp's converter: the BPE pre-tokenizer of a tokenizer it does not know ---------------------------
@contextlib.contextmanager
def llamacpp_bpe_pre_tokenizer(name: str | None) -> Iterator[None]:
    """llama.cpp's convert_hf_to_gguf.py names a BPE tokenizer's pre-tokenizer (`tokenizer.ggml.pre`) by hashing
    how it encodes a test string, and stops with NotImplementedError on a hash it does not list - any tokenizer
    trained from scratch, such as the toy's. When swiftbox has identified the pre-tokenizer from tokenizer.json
    itself (`name`, from swiftbox.export.llamacpp.convert.pre_tokenizer_of), `conversion.base.TextModel.
    get_vocab_base_pre` answers `name` where the original raises; a recognised hash still wins. Runs inside the
    converter's child process (swiftbox.export.llamacpp.driver) with the llama.cpp tree on sys.path; checked against
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


# -- transformers: a chat template's output capped while it renders -------------------------------------------
class TemplateOutputTooLong(ValueError):
    """A chat template's rendering passed the cap (chat_template_output_capped) and was stopped."""

    def __init__(self, limit: int):
        super().__init__(f"the chat template's output passed {limit} characters")
        self.limit = limit


_RENDER_LIMIT: Any = None     # a ContextVar[int | None], made on first use


def _render_limit() -> Any:
    global _RENDER_LIMIT
    if _RENDER_LIMIT is None:
        import contextvars

        _RENDER_LIMIT = contextvars.ContextVar("swiftbox_chat_template_limit", default=None)
    return _RENDER_LIMIT


_RENDER_TRACER: Any = None    # a ContextVar[trace function | None]: data/template_budget.py's clock


def _render_tracer() -> Any:
    global _RENDER_TRACER
    if _RENDER_TRACER is None:
        import contextvars

        _RENDER_TRACER = contextvars.ContextVar("swiftbox_chat_template_tracer", default=None)
    return _RENDER_TRACER


def _capped_concat(pieces: Any) -> str:
    """jinja runs a template while its `concat` consumes the output generator: the render budget's trace function
    (if one is set in this context) watches exactly that, and nothing else of the caller's work."""
    import sys

    tracer = _render_tracer().get()
    if tracer is not None and sys.gettrace() is None:
        sys.settrace(tracer)
        try:
            return _join_capped(pieces)
        finally:
            sys.settrace(None)
    return _join_capped(pieces)


def _join_capped(pieces: Any) -> str:
    limit = _render_limit().get()
    if limit is None:
        return "".join(pieces)
    out, size = [], 0
    for piece in pieces:
        size += len(piece)
        if size > limit:
            raise TemplateOutputTooLong(limit)
        out.append(piece)
    return "".join(out)


@contextlib.contextmanager
def chat_template_output_capped(templates: list[str], limit: int) -> Iterator[None]:
    """While active (in this thread / context only), rendering any of `templates` through transformers'
    apply_chat_template raises TemplateOutputTooLong as soon as its output passes `limit` characters, instead of
    building the whole text: a template that loops a hundred thousand times stops after `limit` characters.
    transformers renders with the jinja Template that `chat_template_utils._compile_jinja_template` (lru-cached per
    template string) returns, and jinja's `Template.render` joins the template's output pieces with its
    environment's `concat`; that attribute of each compiled template's own sandboxed environment is set to a join
    that reads the cap from a ContextVar, so it behaves exactly as `"".join` wherever no cap is active. One
    expression that would build a huge value by itself (`'x' * 10**9`) is refused before it exists by the sandbox
    the templates compile in (`_sized_sandbox`)."""
    for template in templates:
        _compiled(template).environment.concat = _capped_concat
    token = _render_limit().set(limit)
    try:
        yield
    finally:
        _render_limit().reset(token)


@contextlib.contextmanager
def chat_template_traced(templates: list[str], tracer: Callable[..., Any]) -> Iterator[None]:
    """While active (this thread / context), `tracer` is this thread's trace function for as long as jinja runs one
    of `templates` (inside the same patched `concat` as chat_template_output_capped, which leaves the output uncapped
    when no cap is active)."""
    for template in templates:
        _compiled(template).environment.concat = _capped_concat
    token = _render_tracer().set(tracer)
    try:
        yield
    finally:
        _render_tracer().reset(token)


# -- transformers: chat templates compile in a sandbox that bounds what one expression builds ----------------------
_SIZED: Any = None     # the sandbox class, made on first use
# a constant expression larger than this is not folded while jinja compiles (`'%999999999d'|format(1)`): it is built,
# or refused, when the template renders, under the render's cap
FOLD_LIMIT = 1 << 16


def _compiled(template: str) -> Any:
    """transformers' compiled Template for `template` (chat_template_utils._compile_jinja_template, lru-cached per
    string), compiled in `_sized_sandbox()`: on first use that class replaces the module's
    `ImmutableSandboxedEnvironment` (jinja's, which transformers instantiates per template) and the cache is cleared
    once, so from then on every template is compiled in it, the ones apply_chat_template compiles included."""
    from transformers.utils import chat_template_utils

    sized = _sized_sandbox()
    if chat_template_utils.ImmutableSandboxedEnvironment is not sized:
        chat_template_utils.ImmutableSandboxedEnvironment = sized
        chat_template_utils._compile_jinja_template.cache_clear()
    token = _render_limit().set(FOLD_LIMIT)     # jinja folds constant expressions while it compiles
    try:
        return chat_template_utils._compile_jinja_template(template)
    finally:
        _render_limit().reset(token)


def _refuse_past_cap(size: int) -> None:
    limit = _render_limit().get()
    if limit is not None and size > limit:
        raise TemplateOutputTooLong(limit)


def _printf_width(fmt: Any, args: Any) -> int:
    """The largest width / precision of a printf-style format (`*`: the largest int argument)."""
    import re

    if not isinstance(fmt, str):
        return 0
    values = args if isinstance(args, tuple) else (args,)
    widest = 0
    for spec in re.findall(r"%[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?", fmt):
        for n in spec:
            if n.isdigit():
                widest = max(widest, int(n))
            elif n == "*":
                widest = max(widest, *(v for v in values if type(v) is int), 0)
    return widest


def _binop_size(operator: str, left: Any, right: Any) -> int:
    """About how large `left OPERATOR right` comes out (characters, items or decimal digits), without building it."""
    sized = (str, list, tuple)
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, sized) and type(n) is int:
                return len(seq) * n
    elif operator == "+" and isinstance(left, sized) and isinstance(right, sized):
        return len(left) + len(right)
    elif operator == "**" and type(left) is int and type(right) is int and right > 0:
        return left.bit_length() * right // 3
    elif operator == "%":
        return _printf_width(left, right)
    return 0


def _sized_sandbox() -> type:
    """jinja's ImmutableSandboxedEnvironment, except that while a cap is active (the ContextVar
    chat_template_output_capped sets; without one it is jinja's own behaviour) one expression may not build more
    than the cap: `'x' * 10**9`, `[0] * 10**9`, `a + b`, `10 ** 10**9`, a width in a `%` / `|format` / `.format`
    format, a number passed to a str method (`'x'.ljust(10**9)`) or to the `center` / `indent` filters raise
    TemplateOutputTooLong before the value exists. Through jinja's documented hooks (intercepted_binops /
    call_binop, call, wrap_str_format); intercepted operators are not folded into constants at compile time either.
    Bounded only by the render's time budget (data/template_budget.py): a string doubled with `~` in a loop."""
    global _SIZED
    if _SIZED is None:
        import functools
        import re

        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def numbers_capped(f: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(f)
            def checked(value: Any, *args: Any, **kwargs: Any) -> Any:
                _refuse_past_cap(max((a for a in (*args, *kwargs.values()) if type(a) is int), default=0))
                return f(value, *args, **kwargs)
            return checked

        def format_capped(f: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(f)
            def checked(value: Any, *args: Any, **kwargs: Any) -> Any:
                _refuse_past_cap(_printf_width(value, args))
                return f(value, *args, **kwargs)
            return checked

        class SizedSandbox(ImmutableSandboxedEnvironment):
            intercepted_binops = frozenset({"*", "**", "+", "%"})

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                for name in ("center", "indent"):
                    self.filters[name] = numbers_capped(self.filters[name])
                self.filters["format"] = format_capped(self.filters["format"])

            def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
                _refuse_past_cap(_binop_size(operator, left, right))
                return super().call_binop(context, operator, left, right)

            def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
                if isinstance(getattr(__obj, "__self__", None), str):
                    _refuse_past_cap(max((a for a in (*args, *kwargs.values()) if type(a) is int), default=0))
                return super().call(__context, __obj, *args, **kwargs)

            def wrap_str_format(self, value: Any) -> Any:
                fmt = getattr(value, "__self__", None)
                if isinstance(fmt, str) and getattr(value, "__name__", "") in ("format", "format_map"):
                    _refuse_past_cap(max((int(n) for n in re.findall(r"\d+", "".join(re.findall(r"\{[^{}]*\}", fmt)))),
                                         default=0))
                return super().wrap_str_format(value)

        _SIZED = SizedSandbox
    return _SIZED


# -- transformers: hybrid linear-attention / SSM / short-convolution mixers, one packed sample at a time ------
# model_type -> the mixer classes (transformers' names) whose state must not cross a packed row's sample boundary.
# Their forward is `forward(hidden_states, cache=None, attention_mask=None, **kwargs)` (transformers 5.24).
HYBRID_MIXERS = {
    "qwen3_next": ("qwen3_next", "Qwen3NextGatedDeltaNet"), "qwen3_5_text": ("qwen3_5", "Qwen3_5GatedDeltaNet"),
    "qwen3_5_moe_text": ("qwen3_5_moe", "Qwen3_5MoeGatedDeltaNet"),
    "olmo_hybrid": ("olmo_hybrid", "OlmoHybridGatedDeltaNet"), "lfm2": ("lfm2", "Lfm2ShortConv"),
    "lfm2_moe": ("lfm2_moe", "Lfm2MoeShortConv"),
    "granitemoehybrid": ("granitemoehybrid", "GraniteMoeHybridMambaLayer"),
    "nemotron_h": ("nemotron_h", "NemotronHMamba2Mixer"), "falcon_h1": ("falcon_h1", "FalconH1Mixer"),
}
HYBRID_MIXERS["qwen3_5"] = HYBRID_MIXERS["qwen3_5_text"]
HYBRID_MIXERS["qwen3_5_moe"] = HYBRID_MIXERS["qwen3_5_moe_text"]
# model_type -> attention classes whose mask ignores a packed row's boundaries: GraniteMoeHybridModel builds its causal
# mask without position_ids (create_causal_mask(config, inputs_embeds, attention_mask, cache)), so on SDPA / eager
# the packed samples attend to each other. Their forward is `forward(hidden_states, attention_mask, cache=None,
# position_embeddings=None, **kwargs)` -> (output, weights) (transformers 5.24); on a packed row it runs per sample.
HYBRID_ATTENTION = {"granitemoehybrid": ("granitemoehybrid", "GraniteMoeHybridAttention")}
PACKED_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")
# Without causal_conv1d / fla / mamba_ssm, transformers refuses a packed batch in these mixers ("can't keep packed
# sequences apart": integrations.hub_kernels). The per-sample path runs always, kernels installed or not: a kernel's
# own boundary handling (cu_seqlens / seq_idx) is not trusted here until measured on a device that has it.


def hybrid_mixer_classes() -> dict[str, Any]:
    """model_type -> the transformers class of its mixer (imports transformers)."""
    import importlib

    return {t: getattr(importlib.import_module(f"transformers.models.{m}.modeling_{m}"), c)
            for t, (m, c) in HYBRID_MIXERS.items()}


def _sample_bounds(hidden_states: Any, cache: Any, kwargs: dict) -> list[int] | None:
    """The packed row's sample boundaries (padding-free collator: cu_seq_lens_q, else seq_idx), or None when the
    batch is not one packed training row (padded rows, a cache: generation)."""
    import torch

    if cache is not None or hidden_states.shape[0] != 1:
        return None
    length = hidden_states.shape[1]
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None and kwargs.get("seq_idx") is not None:
        idx = kwargs["seq_idx"].reshape(-1)
        change = (torch.nonzero(idx[1:] != idx[:-1]).reshape(-1) + 1).tolist()
        return [0, *change, length] if idx.numel() == length else None
    if cu is None:
        return None
    bounds = [int(b) for b in cu.tolist()]
    return bounds if bounds[0] == 0 and bounds[-1] == length else None


def _per_sample_forward(forward: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(hidden_states: Any, cache: Any = None, attention_mask: Any = None, **kwargs: Any) -> Any:
        import torch

        bounds = _sample_bounds(hidden_states, cache, kwargs)
        if bounds is None:
            return forward(hidden_states, cache=cache, attention_mask=attention_mask, **kwargs)
        rest = {k: v for k, v in kwargs.items() if k not in PACKED_KWARGS}
        pieces = [forward(hidden_states[:, s:e], cache=None, attention_mask=None, **rest)
                  for s, e in zip(bounds[:-1], bounds[1:]) if e > s]
        return torch.cat(pieces, dim=1)
    return wrapped


def _per_sample_attention(forward: Callable[..., Any]) -> Callable[..., Any]:
    """An attention forward that, on a packed row, attends once per sample: its slice of the hidden states and of
    the rotary embeddings, the diagonal block of a 4D causal mask (None stays None: SDPA / flash are causal then),
    without the packed-batch kwargs. The outputs are concatenated; attention weights are not returned."""
    def wrapped(hidden_states: Any, attention_mask: Any = None, cache: Any = None, position_embeddings: Any = None,
                **kwargs: Any) -> Any:
        import torch

        bounds = _sample_bounds(hidden_states, cache, kwargs)
        if bounds is None:
            return forward(hidden_states, attention_mask, cache=cache, position_embeddings=position_embeddings,
                           **kwargs)
        rest = {k: v for k, v in kwargs.items() if k not in PACKED_KWARGS}
        dense = isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 4
        pieces = []
        for s, e in zip(bounds[:-1], bounds[1:]):
            if e <= s:
                continue
            rope = None if position_embeddings is None else tuple(t[:, s:e] for t in position_embeddings)
            mask = attention_mask[..., s:e, s:e] if dense else None
            pieces.append(forward(hidden_states[:, s:e], mask, cache=None, position_embeddings=rope, **rest)[0])
        return torch.cat(pieces, dim=1), None
    return wrapped


def hybrid_mixers_per_sample(model: Any, model_type: str) -> Callable[[], None]:
    """Keep a packed row's samples apart in the model's linear-attention / Mamba-2 / short-convolution mixers
    (HYBRID_MIXERS): on a packed training row (batch of one with the collator's sample boundaries, no cache) the
    mixer runs once per sample (without the packed-batch kwargs) and the outputs are concatenated. Other batches
    pass through unchanged. The attention of a family whose causal mask ignores the packed rows' boundaries
    (HYBRID_ATTENTION: Granite 4) runs per sample the same way. Wraps the model's mixer instances (never the class);
    returns the function that unwraps them. Any other model type: nothing to wrap."""
    import importlib

    if model_type not in HYBRID_MIXERS:
        return lambda: None
    wrapped: list[Any] = []
    for table, per_sample in ((HYBRID_MIXERS, _per_sample_forward), (HYBRID_ATTENTION, _per_sample_attention)):
        if model_type not in table:
            continue
        name, cls = table[model_type]
        mixer = getattr(importlib.import_module(f"transformers.models.{name}.modeling_{name}"), cls)
        mine = [m for m in model.modules() if isinstance(m, mixer) and "forward" not in vars(m)]
        for m in mine:
            m.forward = per_sample(m.forward)
        wrapped += mine

    def restore() -> None:
        for m in wrapped:
            del m.forward
    return restore


@contextlib.contextmanager
def hybrid_mixers_per_sample_scoped(model: Any, model_type: str) -> Iterator[int]:
    """`hybrid_mixers_per_sample` for the duration of a block; yields how many mixers it wrapped."""
    before = sum("forward" in vars(m) for m in model.modules())
    restore = hybrid_mixers_per_sample(model, model_type)
    try:
        yield sum("forward" in vars(m) for m in model.modules()) - before
    finally:
        restore()

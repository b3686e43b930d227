"""One test per library internal swiftbox touches (swiftbox/compat.py): each fails loudly when the library
renames or moves the symbol, and each scoped patch is shown restored afterwards."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from swiftbox import compat


def test_trl_label_position_probe_is_where_the_sft_loss_reads_it():
    import trl.trainer.utils as trl_utils

    assert callable(getattr(trl_utils, "_use_triton", None)), \
        f"trl {compat.CHECKED_AGAINST['trl']} had trl.trainer.utils._use_triton; this trl moved it"
    assert "_use_triton(" in inspect.getsource(trl_utils), "trl.trainer.utils no longer calls _use_triton"
    original = trl_utils._use_triton
    with compat.trl_scores_label_positions_only():
        assert trl_utils._use_triton("cpu") is True
    assert trl_utils._use_triton is original          # restored: DPO later in the process sees TRL's own


def test_trl_probe_is_restored_after_an_error():
    import trl.trainer.utils as trl_utils

    original = trl_utils._use_triton
    with pytest.raises(RuntimeError), compat.trl_scores_label_positions_only():
        raise RuntimeError("training failed")
    assert trl_utils._use_triton is original


@pytest.mark.parametrize("name", sorted(compat.TRL_EXPERIMENTAL))
def test_trl_experimental_trainers_are_where_orpo_and_simpo_import_them(name):
    from transformers import Trainer, TrainingArguments

    config, trainer = compat.trl_experimental(name)
    module = compat.TRL_EXPERIMENTAL[name][0]
    assert issubclass(trainer, Trainer) and issubclass(config, TrainingArguments), \
        f"trl {compat.CHECKED_AGAINST['trl']} had {module}; this trl moved or changed it"
    fields = set(inspect.signature(config).parameters)
    assert {"beta", "max_length"} <= fields                       # what swiftbox/pipelines/{orpo,simpo}.py set
    if name == "cpo":
        assert {"loss_type", "simpo_gamma", "cpo_alpha"} <= fields
    if name == "gkd":                                            # what swiftbox/pipelines/gkd.py sets
        assert {"lmbda", "seq_kd", "temperature", "max_new_tokens", "disable_dropout"} <= fields
        assert {"teacher_model", "data_collator"} <= set(inspect.signature(trainer).parameters)


def test_trl_experimental_move_is_one_line_error(monkeypatch):
    from swiftbox.errors import SwiftboxError

    monkeypatch.setitem(compat.TRL_EXPERIMENTAL, "orpo", ("trl.experimental.nowhere", "ORPOConfig", "ORPOTrainer"))
    with pytest.raises(SwiftboxError, match="checked against TRL"):
        compat.trl_experimental("orpo")


def test_gptqmodel_log_dir_is_a_module_global_it_reads(tmp_path):
    pytest.importorskip("gptqmodel")  # the [quant] extra; installed in the dev venv and CI
    from gptqmodel.looper import loop_processor

    assert hasattr(loop_processor, "_PROJECT_LOG_DIR"), \
        f"gptqmodel {compat.CHECKED_AGAINST['gptqmodel']} had looper.loop_processor._PROJECT_LOG_DIR"
    assert inspect.getsource(loop_processor).count("_PROJECT_LOG_DIR") > 1, "gptqmodel no longer reads it"
    before = loop_processor._PROJECT_LOG_DIR
    with compat.gptqmodel_log_dir(tmp_path / "logs"):
        assert loop_processor._PROJECT_LOG_DIR == tmp_path / "logs"
    assert loop_processor._PROJECT_LOG_DIR == before


def test_gptqmodel_looper_reports_each_layer_to_the_models_layer_callback():
    pytest.importorskip("gptqmodel")
    from gptqmodel.looper import module_looper, stage_layer

    checked = compat.CHECKED_AGAINST["gptqmodel"]
    assert 'getattr(model, "layer_callback", None)' in inspect.getsource(module_looper.ModuleLooper.__init__), \
        f"gptqmodel {checked}'s ModuleLooper read the model's layer_callback; this one does not (no quantize progress)"
    assert "submodule_finalized=True" in inspect.getsource(stage_layer), \
        f"gptqmodel {checked} reported each finalized layer; this one does not"

    class Model:          # what ModuleLooper.__init__ does with the model, then its own dispatch
        pass

    model, seen = Model(), []
    looper = object.__new__(module_looper.ModuleLooper)
    looper.gptq_model = model
    with compat.gptqmodel_layer_callback(model, seen.append):
        looper._layer_callback = getattr(model, "layer_callback", None)
        looper.callbackup(layer_idx=2, submodule_finalized=False)       # quantized: not yet done
        looper.callbackup(layer_idx=2, submodule_finalized=True)        # finalized: done
    assert seen == [2] and not hasattr(model, "layer_callback")         # removed after


def test_uvicorn_server_enters_capture_signals():
    import uvicorn
    import uvicorn.server

    assert inspect.isfunction(getattr(uvicorn.Server, "capture_signals", None)), \
        f"uvicorn {compat.CHECKED_AGAINST['uvicorn']} had Server.capture_signals"
    assert "self.capture_signals()" in inspect.getsource(uvicorn.server.Server), \
        "uvicorn.Server no longer enters capture_signals: Ctrl-C handling of serve must be rechecked"
    server = compat.uvicorn_server(uvicorn.Config(app=lambda *a: None))
    assert isinstance(server, uvicorn.Server)
    assert type(server).capture_signals is not uvicorn.Server.capture_signals


def test_dynamic_cache_layers_round_trip():
    import torch

    keys = [torch.randn(2, 1, 5, 4) for _ in range(3)]
    values = [torch.randn(2, 1, 5, 4) for _ in range(3)]
    cache = compat.cache_from_layers(list(zip(keys, values)))
    layers = compat.cache_layers(cache)
    assert len(layers) == 3
    for (k, v), k0, v0 in zip(layers, keys, values):
        assert torch.equal(k, k0) and torch.equal(v, v0)
    assert cache.get_seq_length() == 5
    compat.cache_drop_left(cache, 2)
    assert cache.get_seq_length() == 3
    assert torch.equal(compat.cache_layers(cache)[0][0], keys[0][:, :, 2:, :])


def test_every_patch_names_the_version_it_was_checked_against():
    text = Path(compat.__file__).read_text()
    for lib in compat.CHECKED_AGAINST:
        assert lib in text
    assert set(compat.CHECKED_AGAINST) == {"trl", "gptqmodel", "uvicorn", "transformers", "lm_eval", "gguf",
                                            "llama-cpp-python", "peft"}


def test_peft_lora_linear_and_trl_tiles_are_where_the_memory_patches_reach():
    """compat.peft_lora_fused / trl_lm_head_tiles (their behaviour: test_lora_fused.py, test_chunked_loss.py):
    PEFT's LoRA Linear still computes `result + lora_B(lora_A(dropout(x))) * scaling` over its base layer, TRL's
    tile sizes still exist under their names."""
    import inspect

    import trl.kernels.chunked_logprob as kernel
    import trl.trainer.utils as trl_utils
    from peft.tuners.lora.layer import Linear

    source = inspect.getsource(Linear.forward)
    assert "result = result + lora_B(lora_A(dropout(x))) * scaling" in source, \
        f"peft {compat.CHECKED_AGAINST['peft']} computed result + lora_B(lora_A(dropout(x))) * scaling; no longer"
    for state in ("self.disable_adapters", "self.merged", "self.active_adapters", "self.lora_variant",
                  "self.base_layer(x"):
        assert state in source, f"peft's LoRA forward no longer reads {state}: compat.peft_lora_fused checks it"
    assert isinstance(kernel.TOKEN_CHUNK_SIZE, int) and isinstance(trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE, int)


def test_trl_preference_preparation_is_where_the_pretokenized_patch_replaces_it():
    import inspect

    from trl import DPOTrainer, KTOTrainer

    for cls in (DPOTrainer, KTOTrainer):
        params = list(inspect.signature(cls._prepare_dataset).parameters)
        assert params == ["self", "dataset", "processing_class", "args", "dataset_name"], cls
        original = cls._prepare_dataset
        with compat.trl_pretokenized(cls):
            assert cls._prepare_dataset is not original
        assert cls._prepare_dataset is original
    assert "self.calculate_KL" in inspect.getsource(KTOTrainer)


@pytest.mark.parametrize("name", ["orpo", "cpo"])
def test_trl_experimental_row_tokenizers_read_the_bos_eos_helpers_from_their_module(name):
    import importlib

    module = importlib.import_module(f"{compat.TRL_EXPERIMENTAL[name][0]}.{name}_trainer")
    before = module.add_eos_token_if_needed, module.add_bos_token_if_needed
    with compat.trl_experimental_as_given(name):
        assert module.add_eos_token_if_needed(0, "c", "r") == ("c", "r")
    assert (module.add_eos_token_if_needed, module.add_bos_token_if_needed) == before


def test_lm_eval_task_config_is_the_registered_task_in_full():
    pytest.importorskip("lm_eval")
    import lm_eval.tasks
    from lm_eval.tasks import TaskManager

    root = Path(lm_eval.tasks.__file__).parent
    manager = TaskManager(include_defaults=False, include_path=[str(root / "arc"), str(root / "hellaswag")])
    cfg = compat.lm_eval_task_config(manager, "arc_challenge")
    # arc_challenge.yaml is two lines over `include: arc_easy.yaml`: the include must come back resolved
    assert cfg["task"] == "arc_challenge" and cfg["dataset_name"] == "ARC-Challenge"
    assert cfg["doc_to_choice"] == "{{choices.text}}" and cfg["output_type"] == "multiple_choice"
    hellaswag = compat.lm_eval_task_config(manager, "hellaswag")
    assert callable(hellaswag["process_docs"]), "the !function hook must come back loaded"


def test_gguf_types_transformers_dequantizes_are_where_the_import_reads_them():
    """swiftbox.hub.gguf refuses a tensor type before converting; the lists it reads must still exist and still
    mean what they meant (the legacy loader: gguf's own dequantize(); the newer one: transformers' kernels)."""
    import numpy as np
    from gguf import GGMLQuantizationType, dequantize, quants

    assert {"llama", "qwen2", "mistral"} <= compat.gguf_architectures()
    legacy = compat.gguf_dequantizable_types("llama")
    assert {"F32", "F16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"} <= legacy
    assert not {"F64", "I32", "Q8_1"} & legacy
    for name in legacy - set(compat.GGUF_FLOAT_TYPES):         # each one really has a dequantizer
        assert GGMLQuantizationType[name] in quants._type_traits
    with pytest.raises(NotImplementedError):                    # and the refused ones really have none
        dequantize(np.zeros(8, dtype=np.uint8), GGMLQuantizationType.F64)
    from transformers.integrations.gguf import is_gguf_arch_supported

    newer = next(iter(__import__("transformers.integrations.gguf.gguf_conversion_mapping",
                                 fromlist=["GGUF_ARCHS"]).GGUF_ARCHS))
    assert is_gguf_arch_supported(newer) and "Q4_K" in compat.gguf_dequantizable_types(newer)



def test_llamacpp_pre_tokenizer_hook_is_where_the_converter_names_it():
    """In a child process (the converter's tree brings its own gguf-py), as swiftbox.export.llamacpp.driver runs it."""
    import subprocess
    import sys

    from swiftbox.export.llamacpp import tree
    from tests.conftest import ROOT

    found = tree()
    if found is None:
        pytest.skip("llama.cpp's tree is not cached here (python -m swiftbox.export.llamacpp.setup --tree-only)")
    code = f"""
import sys
sys.path[:0] = [{str(found)!r}, {str(found / 'gguf-py')!r}, {str(ROOT)!r}]
from conversion.base import TextModel
from swiftbox.compat import llamacpp_bpe_pre_tokenizer
original = TextModel.get_vocab_base_pre
class Tok:
    def encode(self, text):
        return [1, 2, 3]
with llamacpp_bpe_pre_tokenizer("smollm"):
    assert TextModel.get_vocab_base_pre(object.__new__(TextModel), Tok()) == "smollm"
assert TextModel.get_vocab_base_pre is original
try:
    original(object.__new__(TextModel), Tok())
except NotImplementedError:
    print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_chat_template_output_cap_reaches_transformers_rendering():
    """transformers renders chat templates with the jinja Template its `_compile_jinja_template` caches, through
    `Template.render` -> `environment.concat`: while the cap is on, a template that prints 100 KB stops at the cap;
    outside it, the same compiled template renders whole (the join behaves as "".join)."""
    from transformers import AutoTokenizer
    from transformers.utils import chat_template_utils

    from swiftbox.catalog.toy import toy_path

    assert callable(getattr(chat_template_utils, "_compile_jinja_template", None)), \
        f"transformers {compat.CHECKED_AGAINST['transformers']} had chat_template_utils._compile_jinja_template"
    tokenizer = AutoTokenizer.from_pretrained(toy_path())
    bomb = "{% for i in range(1000) %}{{ 'x' * 100 }}{% endfor %}"
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(compat.TemplateOutputTooLong), compat.chat_template_output_capped([bomb], 500):
        tokenizer.apply_chat_template(messages, chat_template=bomb, tokenize=False)
    assert len(tokenizer.apply_chat_template(messages, chat_template=bomb, tokenize=False)) == 100_000
    with compat.chat_template_output_capped([tokenizer.chat_template], 10_000):   # a normal prompt: unchanged
        capped = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert capped == tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_chat_templates_compile_in_the_sized_sandbox():
    """transformers instantiates `chat_template_utils.ImmutableSandboxedEnvironment` for each template it compiles
    and lru-caches the Template (`_compile_jinja_template.cache_clear`): once swiftbox compiled one, every template -
    the ones transformers compiles by itself too - is compiled in the sized sandbox, so while a cap is on one
    expression that would build a gigabyte is refused before it exists; with no cap, jinja's own behaviour."""
    import resource
    import time

    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from transformers import AutoTokenizer
    from transformers.utils import chat_template_utils

    from swiftbox.catalog.toy import toy_path

    where = f"transformers {compat.CHECKED_AGAINST['transformers']} had"
    sandbox = getattr(chat_template_utils, "ImmutableSandboxedEnvironment", type)
    assert issubclass(sandbox, ImmutableSandboxedEnvironment), \
        f"{where} chat_template_utils.ImmutableSandboxedEnvironment (jinja's)"
    assert callable(getattr(chat_template_utils._compile_jinja_template, "cache_clear", None)), \
        f"{where} an lru-cached chat_template_utils._compile_jinja_template"
    gigabyte = "{{ 'x' * (messages|length * 10**9) }}"
    assert type(compat._compiled(gigabyte).environment) is compat._sized_sandbox()
    fresh = "{{ 'y' * (messages|length * 3) }}"                 # compiled by transformers itself, after the swap
    assert type(chat_template_utils._compile_jinja_template(fresh).environment) is compat._sized_sandbox()
    tokenizer = AutoTokenizer.from_pretrained(toy_path())
    messages = [{"role": "user", "content": "hi"}]
    before, began = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    with pytest.raises(compat.TemplateOutputTooLong), compat.chat_template_output_capped([gigabyte], 10_000):
        tokenizer.apply_chat_template(messages, chat_template=gigabyte, tokenize=False)
    assert time.perf_counter() - began < 5 and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000
    assert tokenizer.apply_chat_template(messages, chat_template=fresh, tokenize=False) == "yyy"   # no cap: as ever

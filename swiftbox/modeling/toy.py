"""The built-in offline model, `toy`: a tiny Qwen2-architecture causal LM with a byte-level BPE
tokenizer trained (with `tokenizers`) on bundled text, a ChatML chat template and eos/pad set.

Built deterministically from a seed - same seed, byte-identical safetensors and tokenizer - and cached
under $SWIFTBOX_CACHE (default ~/.cache/swiftbox). Nothing here touches a network.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

TOY_VERSION = 1
VOCAB_SIZE = 1024
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# ChatML, with {% generation %} markers so trainers can keep the loss on assistant tokens only.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' "
    "}}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}{% generation %}{{- message['content'] + '<|im_end|>' }}{% endgeneration %}{{- "
    "'\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
MODEL_SHAPE = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=2048)


def cache_root() -> Path:
    return Path(os.environ.get("SWIFTBOX_CACHE") or Path.home() / ".cache" / "swiftbox")


def toy_path(seed: int = 0) -> Path:
    """The cached toy model directory, building it on first use."""
    target = cache_root() / "toy" / f"v{TOY_VERSION}-seed{seed}"
    if not (target / "model.safetensors").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
        try:
            build_toy(tmp, seed=seed)
            try:
                os.replace(tmp, target)
            except OSError:  # another process finished first: theirs is identical
                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def _corpus() -> list[str]:
    text = (Path(__file__).resolve().parent.parent / "assets" / "toy_corpus.txt").read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    # the digits and task words, so every number and answer tokenizes the same way as in the data
    lines += [f"Is {n} even? Is {n} odd? yes no" for n in range(0, 200)]
    return lines


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Qwen-style: digits stay single tokens, then byte-level BPE
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token=None, model_max_length=MODEL_SHAPE["max_position_embeddings"])
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "right"
    return fast


def build_toy(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the toy model (weights, config, tokenizer, generation config) to `out_dir`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(vocab_size=len(tokenizer), tie_word_embeddings=True, rope_theta=10000.0,
                         bos_token_id=None, eos_token_id=eos, pad_token_id=pad, torch_dtype="float32",
                         **MODEL_SHAPE)
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False,
                                               max_new_tokens=32)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "toy.json").write_text(json.dumps({"toy_version": TOY_VERSION, "seed": seed}) + "\n")
    return out

"""The built-in offline model, `toy`: a small *pretrained* Qwen2-architecture causal LM with a byte-level
BPE tokenizer trained (with `tokenizers`) on bundled text, a ChatML chat template and eos/pad set.

Its weights are committed under swiftbox/assets/toy/ (a few MB) together with the record of how they
were made (toy.json: corpus, steps, seed, time, machine, held-out perplexity against a random model's).
`python -m swiftbox.catalog.toy --rebuild` reproduces them: tokenizer training is byte-identical
everywhere; pretraining (toy_pretrain.py) is byte-identical on the same device and software stack.
`toy_path()` copies the committed model into $SWIFTBOX_CACHE (default ~/.cache/swiftbox) under a key of
TOY_VERSION and the weights' hash, so an older cache (the random toy of version 1) is never reused.
Nothing here touches a network.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from swiftbox.errors import UserError

TOY_VERSION = 2
VOCAB_SIZE = 1024
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
COMMITTED = Path(__file__).resolve().parent.parent / "assets" / "toy"
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
MODEL_SHAPE = {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "max_position_embeddings": 2048}


def cache_root() -> Path:
    return Path(os.environ.get("SWIFTBOX_CACHE") or Path.home() / ".cache" / "swiftbox")


def weights_digest(model_dir: Path = COMMITTED) -> str:
    return hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()


def toy_path(seed: int = 0) -> Path:
    """The cached toy model directory (a copy of the committed one), made on first use."""
    if seed != 0:
        raise UserError(f"model toy:{seed}: the toy is pretrained once (committed weights), there are no seeded "
                        "variants any more; use toy (to pretrain your own: python -m swiftbox.catalog.toy --rebuild "
                        "--seed N --out DIR, then pass DIR)")
    target = cache_root() / "toy" / f"v{TOY_VERSION}-{weights_digest()[:12]}"
    if not (target / "model.safetensors").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".copy-", dir=target.parent))
        try:
            shutil.copytree(COMMITTED, tmp, dirs_exist_ok=True)
            try:
                os.replace(tmp, target)
            except OSError:  # another process finished first: theirs is identical
                pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def build_tokenizer():
    """The byte-level BPE tokenizer, trained on the training corpus (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from swiftbox.catalog.toy_corpus import training_documents

    tok = Tokenizer(models.BPE())
    # Qwen-style: digits stay single tokens, then byte-level BPE
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_documents(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token=None, model_max_length=MODEL_SHAPE["max_position_embeddings"])
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "right"
    return fast


def new_model(tokenizer, seed: int = 0, shape: dict | None = None):
    """A randomly initialised toy-shaped Qwen2 model (the starting point of pretraining)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(vocab_size=len(tokenizer), tie_word_embeddings=True, rope_theta=10000.0,
                         bos_token_id=None, eos_token_id=eos, pad_token_id=pad, torch_dtype="float32",
                         **(shape or MODEL_SHAPE))
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(state)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False,
                                               max_new_tokens=32)
    return model


def heldout_perplexity(model, tokenizer) -> float:
    """Perplexity on assets/toy_heldout.txt, measured exactly as `./launch.sh eval --perplexity` does."""
    from swiftbox.catalog.scoring import perplexity
    from swiftbox.catalog.toy_corpus import HELDOUT
    from swiftbox.data import load_texts

    return perplexity(model, tokenizer, load_texts(HELDOUT))


def build_toy(out_dir: str | Path, seed: int = 0, steps: int | None = None, shape: dict | None = None,
              device=None, tokenizer_dir: str | Path | None = None, log=print) -> Path:
    """Pretrain the toy from scratch and write it (weights, config, tokenizer, generation config, record)."""
    import platform as host
    import time

    import torch
    import transformers

    from swiftbox.catalog.toy_corpus import training_documents
    from swiftbox.catalog.toy_pretrain import PretrainConfig, pretrain

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if tokenizer_dir:  # the tokenizer made elsewhere (it is byte-identical everywhere; saves a step)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    else:
        tokenizer = build_tokenizer()
    model = new_model(tokenizer, seed, shape)
    if device is None:
        from swiftbox.device import current_platform

        device = current_platform().torch_device(0)
    random_ppl = heldout_perplexity(model.to(device), tokenizer)
    log(f"random init: held-out perplexity {random_ppl:.1f}")
    cfg = PretrainConfig(seed=seed, **({"steps": steps} if steps else {}))
    record = pretrain(model, tokenizer, training_documents(), cfg, device, log=log)
    final_ppl = heldout_perplexity(model.to(device), tokenizer)
    model.to("cpu")
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    record.update(toy_version=TOY_VERSION, shape=shape or MODEL_SHAPE, parameters=model.num_parameters(),
                  heldout_perplexity=round(final_ppl, 3),
                  random_model_heldout_perplexity=round(random_ppl, 1), device=str(device),
                  torch_threads=torch.get_num_threads(), machine=host.processor() or host.machine(),
                  torch=torch.__version__, transformers=transformers.__version__,
                  total_seconds=round(time.perf_counter() - started, 1), sha256=weights_digest(out))
    (out / "toy.json").write_text(json.dumps(record, indent=1) + "\n")
    random_ppl = record["random_model_heldout_perplexity"]
    log(f"held-out perplexity {record['heldout_perplexity']} (random init: {random_ppl})")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m swiftbox.catalog.toy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rebuild", action="store_true", help="pretrain the toy from scratch")
    parser.add_argument("--corpus", action="store_true", help="rewrite assets/toy_corpus.txt and toy_heldout.txt")
    parser.add_argument("--out", default=str(COMMITTED), help="where --rebuild writes (default: the committed toy)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--tokenizer", default=None, help="reuse the tokenizer in this directory")
    parser.add_argument("--hidden", type=int, default=None, help="experiments: hidden size (intermediate = 4x)")
    parser.add_argument("--layers", type=int, default=None, help="experiments: number of layers")
    args = parser.parse_args(argv)
    if args.corpus:
        from swiftbox.catalog.toy_corpus import write_corpus

        write_corpus()
    if args.rebuild:
        shape = dict(MODEL_SHAPE)
        if args.hidden:
            shape.update(hidden_size=args.hidden, intermediate_size=4 * args.hidden)
        if args.layers:
            shape.update(num_hidden_layers=args.layers)
        build_toy(args.out, seed=args.seed, steps=args.steps, shape=shape, tokenizer_dir=args.tokenizer)


if __name__ == "__main__":
    main()

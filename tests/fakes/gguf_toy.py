"""Writes the toy model as a GGUF file with the `gguf` package's GGUFWriter, the way llama.cpp lays one out
(qwen2 architecture keys, llama.cpp tensor names, a gpt2-style byte-level vocabulary, the chat template), so
the GGUF import can be tested offline on a file of a few MB whose every weight is known."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


def write_toy_gguf(toy_dir: Path, out: Path, *, as_type: Optional[dict[str, str]] = None, arch: str = "qwen2",
                   drop: tuple[str, ...] = (), no_block_count: bool = False, meta: Optional[dict] = None) -> Path:
    """Write `toy_dir` (the toy model) to `out`. Tensors are F32; `as_type` stores named HF tensors in another
    numpy-backed GGML type ("F16" or "F64") - F64 is one transformers cannot dequantize. Broken variants for the
    import's refusals: `arch` declares another architecture over the same tensors, `drop` leaves out the HF tensors
    whose names start with one of its prefixes, `no_block_count` omits the layer count, `meta` overrides metadata
    (tokenizer.ggml.tokens / .merges / .eos_token_id, head_count)."""
    import numpy as np
    from gguf import MODEL_ARCH, GGUFWriter, TokenType, get_tensor_name_map
    from safetensors.numpy import load_file

    config = json.loads((toy_dir / "config.json").read_text())
    tok = json.loads((toy_dir / "tokenizer.json").read_text())
    template = (toy_dir / "chat_template.jinja").read_text() if (toy_dir / "chat_template.jinja").is_file() else \
        json.loads((toy_dir / "tokenizer_config.json").read_text())["chat_template"]

    meta = meta or {}
    writer = GGUFWriter(str(out), arch)
    writer.add_name("toy")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    if not no_block_count:
        writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(meta.get("head_count", config["num_attention_heads"]))
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    rope = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    writer.add_rope_freq_base(float(rope))

    vocab = dict(tok["model"]["vocab"])
    special = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    vocab.update(special)
    tokens = [""] * len(vocab)
    for text, index in vocab.items():
        tokens[index] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    tokens = meta.get("tokens", tokens)
    writer.add_token_list(tokens)
    writer.add_token_types([TokenType.CONTROL if t in special else TokenType.NORMAL for t in tokens])
    writer.add_token_merges(meta.get("merges", merges))
    writer.add_eos_token_id(meta.get("eos_token_id", config["eos_token_id"]))
    if config.get("pad_token_id") is not None:
        writer.add_pad_token_id(config["pad_token_id"])
    writer.add_chat_template(template)

    names = get_tensor_name_map(MODEL_ARCH.QWEN2, config["num_hidden_layers"])
    dtypes = {"F16": np.float16, "F64": np.float64, "F32": np.float32}
    for hf_name, array in load_file(str(toy_dir / "model.safetensors")).items():
        if hf_name.startswith(drop):
            continue
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf_name
        kind = (as_type or {}).get(hf_name, "F32")
        writer.add_tensor(name, np.ascontiguousarray(array.astype(dtypes[kind])))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out

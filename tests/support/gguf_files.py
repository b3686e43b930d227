"""Test helper: small GGUF files written with the `gguf` package (llama.cpp's gguf-py), shaped like a converter's
output - metadata, tokenizer, chat template, decoder weights in a chosen type - for the header and verify checks.
They are not runnable models."""
from __future__ import annotations

from pathlib import Path

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def write_gguf(path: Path, *, weight_type: str = "Q8_0", template: str | None = CHATML, tokens: int = 8,
               adapter: bool = False, layers: int = 2) -> Path:
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    writer = GGUFWriter(str(path), "llama")
    writer.add_type("adapter" if adapter else "model")
    if adapter:
        writer.add_string("adapter.type", "lora")
        writer.add_float32("adapter.lora.alpha", 16.0)
    else:
        writer.add_block_count(layers)
        writer.add_file_type(7 if weight_type == "Q8_0" else 1)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("smollm")
        writer.add_token_list([f"t{i}" for i in range(tokens)])
        writer.add_eos_token_id(2)
        if template is not None:
            writer.add_chat_template(template)
    rng = np.random.default_rng(0)
    qtype = GGMLQuantizationType[weight_type]
    for layer in range(layers):
        for name in ("attn_q", "ffn_down"):
            data = rng.standard_normal((64, 64)).astype(np.float32)
            if qtype == GGMLQuantizationType.F32:
                writer.add_tensor(f"blk.{layer}.{name}.weight", data)
            elif qtype == GGMLQuantizationType.F16:
                writer.add_tensor(f"blk.{layer}.{name}.weight", data.astype(np.float16))
            else:
                writer.add_tensor(f"blk.{layer}.{name}.weight", quantize(data, qtype),
                                  raw_dtype=qtype)
        writer.add_tensor(f"blk.{layer}.attn_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path

"""bench serve's reference side: a plain `model.generate` loop in its own process, one request at a time.

    python bench/_generate_loop.py MODEL_DIR DTYPE

Loads the model once, then for every JSON line on stdin (a list of {"messages", "max_tokens"} requests)
answers them one after another with `model.generate` (greedy, the chat template, the model's EOS) and
prints one JSON line: output tokens, wall seconds, tokens/s, and the answers' token ids.
"""
from __future__ import annotations

import json
import sys
import time


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, dtype = sys.argv[1], sys.argv[2]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        reqs = json.loads(line)
        began = time.perf_counter()
        tokens, answers = 0, []
        with torch.inference_mode():
            for r in reqs:
                ids = tok.apply_chat_template(r["messages"], add_generation_prompt=True, return_tensors="pt",
                                              return_dict=True)
                out = model.generate(**ids, max_new_tokens=r["max_tokens"], do_sample=False,
                                     pad_token_id=tok.pad_token_id)
                new = out[0, ids["input_ids"].shape[1]:].tolist()
                if new and new[-1] == tok.eos_token_id:
                    new = new[:-1]
                tokens += len(new)
                answers.append(new)
        wall = time.perf_counter() - began
        print(json.dumps({"output_tokens": tokens, "wall_s": round(wall, 3), "tok_s": round(tokens / wall, 3),
                          "answers": answers}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

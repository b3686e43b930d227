"""`./launch.sh bench export`: the export proofs on the toy task, end to end, as one JSON line.

Trains a small LoRA adapter on the bundled parity task with a plain PEFT loop (independent of the sft
pipeline), then runs the merge step and one quantize step per export method, and measures greedy task
accuracy of the adapter, the merged model and each export on recipes/data/parity_eval.jsonl, the steps'
own figures, and the pre-deploy gate (`verify`) on each export plus the adapter's fit for vLLM.
Options: --steps N (default 150), --lr (3e-3), --bits 4|8, --methods gptq,awq,bnb, --out DIR
(default runs/bench-export).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "recipes" / "data"


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def train_adapter(out: Path, steps: int, lr: float = 3e-3, seed: int = 0) -> float:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swiftbox.catalog import toy_path

    torch.manual_seed(seed)
    base = toy_path(0)
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    # the menu's defaults: rank 8, alpha 16, all linear layers; the pretrained toy learns the rule with them
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    examples = []
    for row in rows("parity_sft.jsonl"):
        prompt = tok.apply_chat_template(row["messages"][:-1], tokenize=False, add_generation_prompt=True)
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        a_ids = tok(row["messages"][-1]["content"] + "<|im_end|>", add_special_tokens=False)["input_ids"]
        examples.append((p_ids + a_ids, [-100] * len(p_ids) + a_ids))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    loss = None
    for step in range(steps):
        idx = torch.randint(len(examples), (16,), generator=gen).tolist()
        width = max(len(examples[i][0]) for i in idx)
        ids = torch.tensor([examples[i][0] + [tok.pad_token_id] * (width - len(examples[i][0])) for i in idx])
        labels = torch.tensor([examples[i][1] + [-100] * (width - len(examples[i][1])) for i in idx])
        mask = (torch.arange(width)[None, :] < torch.tensor([len(examples[i][0]) for i in idx])[:, None]).long()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % 25 == 0:
            print(f"bench export: step {step}/{steps} loss {float(loss):.4f}", file=sys.stderr, flush=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "swiftbox.json").write_text(json.dumps({
        "swiftbox_manifest": 1, "kind": "sft", "artifact": "adapter", "base_model": "toy", "method": "lora",
        "datasets": [str(DATA / "parity_sft.jsonl")], "dtype": "float32", "input": "toy"}))
    return float(loss)


def accuracy(ref: str) -> float:
    import torch

    from swiftbox.device import current_platform
    from swiftbox.modeling import load_model, load_tokenizer, resolve_spec

    spec = resolve_spec(ref)
    tok = load_tokenizer(spec)
    tok.padding_side = "left"
    model = load_model(spec, current_platform(), "float32")
    data = rows("parity_eval.jsonl")
    prompts = [tok.apply_chat_template(r["messages"][:-1], tokenize=False, add_generation_prompt=True) for r in data]
    right = 0
    for start in range(0, len(prompts), 25):
        batch = tok(prompts[start:start + 25], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
        for i, seq in enumerate(out[:, batch["input_ids"].shape[1]:]):
            answer = tok.decode(seq, skip_special_tokens=True).strip().lower()
            right += answer == data[start + i]["messages"][-1]["content"].strip().lower()
    return right / len(data)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="bench export")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--bits", type=int, default=4, choices=[4, 8])
    parser.add_argument("--methods", default="gptq,awq,bnb", help="comma-separated quantize methods")
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench-export"))
    args = parser.parse_args(argv)
    from swiftbox.modeling import gptqmodel_env

    gptqmodel_env()
    import swiftbox as sb
    from swiftbox.verify import verify

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.time()
    final_loss = train_adapter(out / "adapter", args.steps, args.lr)
    train_s = time.time() - t0
    merge = sb.merge(str(out / "adapter"), output=str(out / "merged"))["metrics"]
    result = {
        "bench": "export", "train_steps": args.steps, "train_loss": final_loss, "train_seconds": round(train_s, 1),
        "accuracy_base": accuracy("toy"), "accuracy_adapter": accuracy(str(out / "adapter")),
        "accuracy_merged": accuracy(str(out / "merged")),
        "merge_max_abs_logit_diff": merge["max_abs_logit_diff"], "merge_seconds": merge["seconds"], "exports": {},
    }
    vllm_fit = verify(str(out / "adapter"), engine="vllm", serve=False)
    result["adapter_vllm_failures"] = [c.line() for c in vllm_fit.failures]  # modules_to_save=["norm"] here
    for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
        bits = 4 if method == "awq" else args.bits
        target = out / f"{method}{bits}"
        quant = sb.quantize(str(out / "merged"), output=str(target), method=method, bits=bits)["metrics"]
        started = time.time()
        gate = verify(str(target))
        result["exports"][method] = {
            "bits": bits, "accuracy": accuracy(str(target)), "size_ratio": quant["size_ratio"],
            "size_bytes": quant["size_bytes"], "source_size_bytes": quant["source_size_bytes"],
            "quantize_seconds": quant["quantize_seconds"], "quantize_step_seconds": quant["seconds"],
            "perplexity_before": quant["perplexity_before"], "perplexity_after": quant["perplexity_after"],
            "argmax_agreement": quant["argmax_agreement"], "cosine_mean": quant["cosine_mean"],
            "verify_ok": gate.ok, "verify_failures": [c.line() for c in gate.failures],
            "verify_seconds": round(time.time() - started, 1),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

"""Test helpers: LoRA / DoRA / QLoRA adapters made directly with PEFT on the toy model, with the
manifest the SFT pipeline writes (`artifact: adapter`, `base_model`, `method`, `datasets`)."""
from __future__ import annotations

import json
from pathlib import Path


def one_line_error(res) -> str:
    """The CLI's refusal: exactly one `swiftbox:` line and no traceback (other stderr is progress logging)."""
    lines = [line for line in res.stderr.splitlines() if line.startswith("swiftbox:")]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


PARITY_SFT = str(Path(__file__).resolve().parents[2] / "recipes" / "data" / "parity_sft.jsonl")


def make_adapter(base_dir: Path, out: Path, method: str = "lora", *, seed: int = 0, base_ref: str | None = None,
                 manifest: bool = True, datasets: list[str] | None = None, rank: int = 4) -> Path:
    """Attach a randomly initialised (so it changes outputs) adapter to the toy model and save it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    kwargs = {"dtype": torch.float32}
    if method == "qlora":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_compute_dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(base_dir, device_map="cpu", **kwargs)
    if method == "qlora":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", init_lora_weights=False,
                        use_dora=(method == "dora"), task_type="CAUSAL_LM")
    model = get_peft_model(model, config)
    if method == "qlora":  # one real optimizer step through the 4-bit base, as QLoRA training does
        ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
    with torch.no_grad():  # LoRA B starts random with init_lora_weights=False; keep the effect modest
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.mul_(0.5)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out)
    config_file = out / "adapter_config.json"
    data = json.loads(config_file.read_text())
    data["base_model_name_or_path"] = base_ref or str(base_dir)
    config_file.write_text(json.dumps(data))
    if manifest:
        data = datasets if datasets is not None else [PARITY_SFT]
        (out / "swiftbox.json").write_text(json.dumps({
            "swiftbox_manifest": 1, "kind": "sft", "artifact": "adapter", "base_model": base_ref or str(base_dir),
            "method": method, "datasets": data, "dtype": "float32", "input": base_ref or str(base_dir),
            "config": {"dataset": data[0] if data else None, "method": method},
        }))
    return out


_CACHE: dict[str, Path] = {}


def _scratch() -> Path:
    import atexit
    import shutil
    import tempfile

    if "root" not in _CACHE:
        _CACHE["root"] = Path(tempfile.mkdtemp(prefix="swiftbox-export-tests-"))
        atexit.register(shutil.rmtree, _CACHE["root"], True)
    return _CACHE["root"]


def shared_adapter(method: str = "lora") -> Path:
    """One adapter per method per test process, shared by the export test modules."""
    from swiftbox.catalog.toy import toy_path

    key = f"adapter-{method}"
    if key not in _CACHE:
        seed = {"lora": 0, "dora": 1, "qlora": 2}.get(method, 3)
        _CACHE[key] = make_adapter(toy_path(0), _scratch() / key, method, seed=seed)
    return _CACHE[key]


def shared_merged() -> Path:
    """The shared LoRA adapter merged by the merge step (its manifest carries the training data lineage)."""
    import swiftbox as sb

    if "merged" not in _CACHE:
        out = _scratch() / "merged-lora"
        sb.merge(str(shared_adapter("lora")), output=str(out))
        _CACHE["merged"] = out
    return _CACHE["merged"]

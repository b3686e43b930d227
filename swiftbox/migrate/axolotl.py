"""Axolotl: its training YAML (`axolotl train x.yml`) as swiftbox settings. Defaults are Axolotl's own
(src/axolotl/utils/schemas: config.py, training.py, peft.py, datasets.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from swiftbox.migrate import templates
from swiftbox.migrate.engine import Context, Peer
from swiftbox.migrate.table import ABSENT, IGNORE, READ, REFUSE, Key, Refused, as_bool, as_float, as_int, as_list

NAME = "Axolotl"
RL = {"dpo": "dpo", "ipo": "dpo", "kto": "kto", "orpo": "orpo", "simpo": "simpo"}
PREF = ("dpo", "kto", "orpo", "simpo")
# datasets[].type -> what swiftbox reads it as
SFT_TYPES = ("chat_template",)
PAIR_TYPES = {"chatml.prompt_pairs": "chatml", "llama3.prompt_pairs": "llama3"}   # prompt/chosen/rejected strings
DATASET_KEYS = {"path", "type", "split", "ds_type", "data_files", "field_messages", "message_property_mappings",
                "message_field_role", "message_field_content", "roles", "roles_to_train", "train_on_eos", "field",
                "chat_template", "field_chosen", "field_rejected", "field_prompt", "text_column"}
SWIFTBOX_ROLES = {"user": ("user", "human"), "assistant": ("assistant", "gpt", "model", "bot"), "system": ("system",),
                  "tool": ("tool", "function", "observation")}


def _warmup(config: dict) -> Any:
    """0.03 when warmup_steps is unset too (Axolotl: min(3% of the steps, 100))"""
    return 0.03 if config.get("warmup_steps") is None else ABSENT


TABLE: list[Key] = [
    Key("base_model", how=READ, note="the model: a hub id, a local dir or `toy`"),
    Key("base_model_config", how=REFUSE, note="swiftbox reads the model's own config.json"),
    Key("model_type", how=IGNORE, note="swiftbox reads the architecture from config.json"),
    Key("tokenizer_type", how=REFUSE, accept=(None, "AutoTokenizer"), note="swiftbox loads the model's own "
        "tokenizer (AutoTokenizer)"),
    Key("trust_remote_code", "trust_remote_code", False, convert=as_bool),
    Key("special_tokens", how=READ, note="pad_token only (padding is masked: no effect on the loss); other tokens "
        "are refused (they change the vocabulary or the end of turn)"),
    Key("chat_template", how=READ, note="checked against the model's own chat template (swiftbox renders with "
        "that); tokenizer_default passes"),
    Key("rl", how=READ, note="dpo | ipo | kto | orpo | simpo -> the step of the same kind (ipo: dpo loss_type ipo); "
        "unset -> sft (or pt for completion datasets); grpo and others are refused"),
    Key("adapter", how=READ, note="lora -> method lora; qlora (with load_in_4bit) -> qlora; unset -> full"),
    Key("load_in_4bit", how=READ, default=False, note="with adapter qlora"),
    Key("load_in_8bit", how=REFUSE, accept=(None, False), note="swiftbox has no 8-bit LoRA; use adapter: qlora with "
        "load_in_4bit: true, or plain lora"),
    Key("lora_model_dir", how=REFUSE, note="continuing an adapter: give its directory as base_model"),
    Key("peft_use_dora", how=READ, default=False, note="true -> method dora"),
    Key("peft_use_rslora", "lora.use_rslora", False, convert=as_bool),
    Key("lora_r", "lora.rank", convert=as_int, note="required with an adapter"),
    Key("lora_alpha", "lora.alpha", convert=as_float, note="required with an adapter"),
    Key("lora_dropout", "lora.dropout", 0.0, convert=as_float),
    Key("lora_target_modules", how=READ, note="names -> lora.targets"),
    Key("lora_target_linear", how=READ, note="true -> lora.targets all-linear"),
    Key("datasets", how=READ, note="local files; type chat_template (sft), completion (pt), "
        "chatml.prompt_pairs / llama3.prompt_pairs (preference); alpaca is refused (Axolotl renders its own "
        "Alpaca prompt, not the model's template)"),
    Key("dataset_prepared_path", how=IGNORE, note="preprocessing cache"),
    Key("val_set_size", how=REFUSE, accept=(None, 0), note="swiftbox does not split a held-out set off the training "
        "data; give a file of its own as swiftbox's eval_dataset"),
    Key("test_datasets", how=REFUSE, note="give the file as swiftbox's eval_dataset"),
    Key("output_dir", "output", "./model-out"),
    Key("sequence_len", how=READ, default=512, note="-> max_length (pt: block_size)"),
    Key("sample_packing", how=READ, default=False, note="true -> packing true (exact: Axolotl's packing keeps "
        "samples apart too); false -> swiftbox's default (exact packing: the same loss)"),
    Key("eval_sample_packing", how=IGNORE, note="evaluation batching"),
    Key("pad_to_sequence_len", how=IGNORE, note="padding: speed only"),
    Key("train_on_inputs", how=REFUSE, accept=(None, False), note="swiftbox trains on the replies only"),
    Key("micro_batch_size", "batch_size", 1, convert=as_int),
    Key("gradient_accumulation_steps", "grad_accum", 1, convert=as_int),
    Key("num_epochs", "epochs", 1.0, convert=as_float),
    Key("max_steps", "max_steps", -1, convert=as_int),
    Key("learning_rate", "learning_rate", convert=as_float, note="required by Axolotl"),
    Key("lr_scheduler", "lr_scheduler", "cosine"),
    Key("warmup_ratio", "warmup_ratio", _warmup, convert=as_float, note="unset with warmup_steps unset: 0.03 "
        "(Axolotl caps that warmup at 100 steps; swiftbox does not, so runs past 3,333 steps warm up longer)"),
    Key("warmup_steps", how=REFUSE, accept=(None, 0), note="use warmup_ratio"),
    Key("weight_decay", "weight_decay", 0.0, convert=as_float),
    Key("seed", "seed", 42, convert=as_int),
    Key("optimizer", how=REFUSE, accept=(None, "adamw_torch_fused", "adamw_torch"), note="swiftbox trains with "
        "transformers' AdamW (adamw_torch_fused / adamw_torch); 8-bit and other optimizers are not offered"),
    Key("max_grad_norm", how=REFUSE, accept=(None, 1.0), note="swiftbox clips at 1.0"),
    Key("bf16", how=READ, default="auto", note="true -> bfloat16; auto -> auto (the device's); false -> float32 "
        "unless fp16"),
    Key("fp16", how=READ, default=False, note="true -> float16"),
    Key("tf32", how=IGNORE, note="matmul precision mode on NVIDIA GPUs: speed"),
    Key("gradient_checkpointing", "gradient_checkpointing", False, convert=as_bool),
    Key("resume_from_checkpoint", how=REFUSE, accept=(None, False), note="swiftbox resumes its own checkpoints: "
        "resume: true on the same output"),
    Key("auto_resume_from_checkpoints", how=REFUSE, accept=(None, False), note="use resume: true"),
    Key("logging_steps", how=IGNORE, note="logging"),
    Key("attn_implementation", how=IGNORE, note="attention kernel: speed only"),
    Key("flash_attention", how=IGNORE, note="attention kernel: speed only"),
    Key("sdp_attention", how=IGNORE, note="attention kernel: speed only"),
    Key("loss_watchdog_threshold", how=IGNORE, note="stops a diverging run (swiftbox stops on a non-finite loss)"),
    Key("loss_watchdog_patience", how=IGNORE, note="see loss_watchdog_threshold"),
    Key("evals_per_epoch", how=IGNORE, note="evaluation cadence"),
    Key("eval_steps", how=IGNORE, note="evaluation cadence"),
    Key("saves_per_epoch", how=IGNORE, note="checkpoint cadence"),
    Key("save_steps", how=IGNORE, note="checkpoint cadence"),
    Key("save_total_limit", how=IGNORE, note="checkpoint housekeeping"),
    Key("save_first_step", how=IGNORE, note="checkpoint cadence"),
    Key("hub_model_id", how=REFUSE, note="swiftbox does not upload; push the output yourself"),
    Key("wandb_project", how=IGNORE, note="tracker (swiftbox: report_to wandb)"),
    Key("wandb_entity", how=IGNORE, note="tracker"),
    Key("wandb_watch", how=IGNORE, note="tracker"),
    Key("wandb_name", how=IGNORE, note="tracker"),
    Key("wandb_log_model", how=IGNORE, note="tracker"),
    Key("deepspeed", "deepspeed", note="a DeepSpeed .json path"),
    Key("rl_beta", "beta", 0.1, convert=as_float, kinds=PREF, note="TRL's default beta"),
]


def kind_of(config: dict) -> str:
    rl = config.get("rl")
    if rl is None:
        types = {str(d.get("type")) for d in config.get("datasets") or [] if isinstance(d, dict)}
        return "pt" if types == {"completion"} else "sft"
    if str(rl) not in RL:
        raise Refused(f"{NAME} rl {rl!r}: swiftbox reads {' | '.join(RL)} (GRPO: swiftbox's grpo step)")
    return RL[str(rl)]


def read(config: dict, ctx: Context) -> dict:
    model = str(config["base_model"])
    out: dict[str, Any] = {"model": model, "method": _method(config)}
    if out["method"] != "full":
        targets, linear = config.get("lora_target_modules"), config.get("lora_target_linear")
        if targets and linear is not None and as_bool(linear):
            raise Refused(f"{NAME} lora_target_modules and lora_target_linear are both set; keep one")
        if linear is not None and as_bool(linear):
            out["lora"] = {"targets": "all-linear"}
        elif targets:
            out["lora"] = {"targets": as_list(targets)}
        else:
            raise Refused(f"{NAME} adapter without lora_target_modules or lora_target_linear: name the targets")
        for key in ("lora_r", "lora_alpha"):
            if config.get(key) is None:
                raise Refused(f"{NAME} {key} is missing: Axolotl needs it with an adapter")
    out["dataset"] = _datasets(config, ctx)
    out["block_size" if ctx.kind == "pt" else "max_length"] = as_int(config.get("sequence_len", 512))
    if config.get("sample_packing") is not None and ctx.kind == "sft":
        out["packing"] = as_bool(config["sample_packing"])
    elif as_bool(config.get("sample_packing") or False) and ctx.kind != "pt":
        raise Refused(f"{ctx.source}: {NAME} sample_packing true with rl {ctx.kind}: swiftbox packs sft rows only")
    out["dtype"] = _dtype(config)
    if config.get("rl") == "ipo":
        out["loss_type"] = "ipo"
    special = config.get("special_tokens") or {}
    if not isinstance(special, dict) or set(special) - {"pad_token"}:
        other = sorted(set(special) - {"pad_token"}) if isinstance(special, dict) else [repr(special)]
        raise Refused(f"{NAME} special_tokens.{other[0]}: swiftbox keeps the tokenizer's own special tokens (a new "
                      "eos/bos changes what the model learns to end with); remove it")
    if config.get("chat_template") is not None:
        templates.check(NAME, "chat_template", str(config["chat_template"]), model, text_only=ctx.kind == "pt",
                        fetch=ctx.fetch)
    return out


def _method(config: dict) -> str:
    adapter = config.get("adapter")
    four = as_bool(config.get("load_in_4bit", False))
    dora = as_bool(config.get("peft_use_dora", False))
    if adapter in (None, ""):
        if four:
            raise Refused(f"{NAME} load_in_4bit without an adapter: a 4-bit model trains adapters only (adapter: "
                          "qlora)")
        return "full"
    if adapter == "qlora":
        if not four:
            raise Refused(f"{NAME} adapter qlora needs load_in_4bit: true")
        return "qlora"
    if adapter != "lora":
        raise Refused(f"{NAME} adapter {adapter!r}: swiftbox trains lora or qlora")
    if four:
        raise Refused(f"{NAME} adapter lora with load_in_4bit: use adapter: qlora")
    return "dora" if dora else "lora"


def _dtype(config: dict) -> str:
    bf16, fp16 = config.get("bf16", "auto"), as_bool(config.get("fp16", False) or False)
    if str(bf16).lower() == "auto":
        return "float16" if fp16 else "auto"
    if as_bool(bf16):
        if fp16:
            raise Refused(f"{NAME} bf16 and fp16 are both true; pick one")
        return "bfloat16"
    return "float16" if fp16 else "float32"


def _datasets(config: dict, ctx: Context) -> Any:
    entries = config.get("datasets")
    if not isinstance(entries, list) or not entries:
        raise Refused(f"{ctx.source}: {NAME} datasets is missing: a list of {{path, type}}")
    out = []
    for i, entry in enumerate(entries):
        where = f"{NAME} datasets[{i}]"
        if not isinstance(entry, dict) or not entry.get("path"):
            raise Refused(f"{where}: expected a mapping with path and type")
        extra = sorted(set(entry) - DATASET_KEYS)
        if extra:
            raise Refused(f"{where}.{extra[0]}: not read by swiftbox; remove it")
        path = Path(str(entry["path"]))
        path = path if path.is_absolute() else ctx.base / path
        if not path.is_file():
            raise Refused(f"{where}: {entry['path']!r} is not a local file; swiftbox trains on local files (download "
                          "a hub dataset and give its path)")
        family = _check_type(where, entry, ctx)
        if family is not None:
            templates.check(NAME, f"datasets[{i}].type", family, str(config["base_model"]), fetch=ctx.fetch)
        out.append(str(path))
    return out[0] if len(out) == 1 else out


def _check_type(where: str, entry: dict, ctx: Context) -> Optional[str]:
    """Refuse a dataset type swiftbox would read differently; the template family a pair type renders with."""
    kind, dtype = ctx.kind, str(entry.get("type", ""))
    if dtype == "alpaca" or dtype.startswith("alpaca"):
        raise Refused(f"{where}: type {dtype}: Axolotl renders its own Alpaca prompt ('### Instruction:'), not the "
                      "model's chat template; swiftbox renders with the template: use type chat_template with a "
                      "messages file")
    if kind == "pt":
        if dtype != "completion" or entry.get("field", "text") != "text":
            raise Refused(f"{where}: pt reads type completion with the `text` field")
        return None
    if kind in PREF:
        if dtype in PAIR_TYPES:
            for field in ("field_prompt", "field_chosen", "field_rejected"):
                if entry.get(field) not in (None, field.removeprefix("field_")):
                    raise Refused(f"{where}.{field} = {entry[field]!r}: swiftbox reads {field.removeprefix('field_')}")
            return PAIR_TYPES[dtype]
        raise Refused(f"{where}: type {dtype!r} for rl {kind}: swiftbox reads prompt/chosen/rejected rows "
                      f"({' / '.join(PAIR_TYPES)}) rendered with the model's template")
    if dtype.split(".")[0] not in SFT_TYPES:
        raise Refused(f"{where}: type {dtype!r}: swiftbox reads chat_template (sft) and completion (pt)")
    field = entry.get("field_messages", "messages")
    if field not in ("messages", "conversations"):
        raise Refused(f"{where}.field_messages = {field!r}: swiftbox reads messages or conversations; rename it")
    mapping = entry.get("message_property_mappings") or {}
    for prop, column in mapping.items():
        if (prop, column) not in (("role", "role"), ("content", "content"), ("role", "from"), ("content", "value")):
            raise Refused(f"{where}.message_property_mappings.{prop} = {column!r}: swiftbox reads role/content or "
                          "from/value")
    for role, names in (entry.get("roles") or {}).items():
        known = SWIFTBOX_ROLES.get(role, ())
        bad = [n for n in as_list(names) if n not in known]
        if bad:
            raise Refused(f"{where}.roles.{role}: {bad[0]!r} is not read as {role} by swiftbox ({', '.join(known)})")
    if entry.get("roles_to_train") not in (None, ["assistant"], ["gpt"], ["assistant", "gpt"]):
        raise Refused(f"{where}.roles_to_train: swiftbox trains the assistant turns only")
    if entry.get("train_on_eos") not in (None, "turn"):
        raise Refused(f"{where}.train_on_eos {entry['train_on_eos']!r}: swiftbox trains each reply's end-of-turn "
                      "(turn)")
    if entry.get("chat_template") not in (None, "tokenizer_default"):
        raise Refused(f"{where}.chat_template: swiftbox renders with the model's own template (tokenizer_default)")
    return None


PEER = Peer(name=NAME, slug="axolotl", table=TABLE, kind_of=kind_of, read=read, model_key="base_model")


def detect(config: dict) -> bool:
    return "base_model" in config and ("datasets" in config or "adapter" in config)


def export(kind: str, model: str, config: dict, out: dict, data_dir: Any) -> dict:
    """The keys the table's `read` rows stand for."""
    from swiftbox.data.reading import split_spec
    from swiftbox.migrate.engine import first_row

    if kind == "rm":
        raise Refused("export-config: Axolotl's reward modelling is not read by swiftbox's importer; no export")
    out["base_model"] = model
    if kind in ("dpo", "kto", "orpo", "simpo"):
        loss = config.get("loss_type", "sigmoid")
        if kind == "dpo" and loss not in ("sigmoid", "ipo"):
            raise Refused(f"export-config: dpo loss_type {loss!r} has no Axolotl rl")
        out["rl"] = "ipo" if kind == "dpo" and loss == "ipo" else kind
    method = config.get("method", "lora")
    if method != "full":
        out["adapter"] = "qlora" if method == "qlora" else "lora"
        if method == "qlora":
            out["load_in_4bit"] = True
        if method == "dora":
            out["peft_use_dora"] = True
        targets = (config.get("lora") or {}).get("targets", "all-linear")
        if targets == "all-linear":
            out["lora_target_linear"] = True
        else:
            out["lora_target_modules"] = as_list(targets)
    entries = []
    specs = config.get("dataset")
    for spec in [specs] if isinstance(specs, str) else specs or []:
        path, count = split_spec(spec)
        if count is not None:
            raise Refused(f"export-config: {spec}: Axolotl has no path#N sampling")
        row = first_row(spec)
        entry: dict[str, Any] = {"path": str(path.resolve())}
        if kind == "pt":
            entry["type"] = "completion"
        elif kind in PREF:
            family = "chatml" if templates.CHATML in (templates.model_template(model, False) or "") else "llama3"
            if not all(isinstance(row.get(c), str) for c in ("prompt", "chosen", "rejected")):
                raise Refused(f"export-config: {spec}: Axolotl's prompt-pair types read prompt/chosen/rejected strings")
            entry["type"] = f"{family}.prompt_pairs"
        elif "messages" in row or "conversations" in row:
            entry["type"] = "chat_template"
            if "conversations" in row:
                entry["field_messages"] = "conversations"
                turns = row["conversations"]
                if turns and isinstance(turns[0], dict) and "from" in turns[0]:
                    entry["message_property_mappings"] = {"role": "from", "content": "value"}
        else:
            raise Refused(f"export-config: {spec}: Axolotl renders these rows with its own prompt format; only "
                          "messages / conversations rows keep the model's template")
        entries.append(entry)
    out["datasets"] = entries
    out["sequence_len"] = config["block_size" if kind == "pt" else "max_length"]
    if config.get("packing") is not None and kind == "sft":
        out["sample_packing"] = bool(config["packing"])
    dtype = config.get("dtype", "auto")
    out["bf16"] = {"auto": "auto", "bfloat16": True, "float16": False, "float32": False}[dtype]
    if dtype == "float16":
        out["fp16"] = True
    if config.get("eval_dataset"):
        raise Refused("export-config: eval_dataset has no Axolotl key swiftbox reads (test_datasets is refused)")
    return {}

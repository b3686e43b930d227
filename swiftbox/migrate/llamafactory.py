"""LLaMA-Factory: its training YAML (`llamafactory-cli train x.yaml`) and its `dataset_info.json`, as swiftbox
settings. The table is the source of truth (docs/migrating.md is rendered from it); defaults are LLaMA-Factory's
own (its ModelArguments / DataArguments / FinetuningArguments and transformers' TrainingArguments)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swiftbox.migrate import templates
from swiftbox.migrate.engine import Context, Peer
from swiftbox.migrate.table import IGNORE, READ, REFUSE, Key, Refused, as_bool, as_float, as_int, as_list

NAME = "LLaMA-Factory"
STAGES = {"sft": "sft", "pt": "pt", "dpo": "dpo", "kto": "kto", "rm": "rm"}
PREF_LOSSES = {"sigmoid": "dpo", "ipo": "dpo", "hinge": "dpo", "orpo": "orpo", "simpo": "simpo"}
PREF = ("dpo", "kto", "orpo", "simpo")
TRAIN = ("sft", "pt", "dpo", "kto", "orpo", "simpo", "rm")
DS_PRESETS = {"ds_z2_config.json": "zero2", "ds_z3_config.json": "zero3", "ds_z3_offload_config.json": "zero3_offload",
              "ds_z2_offload_config.json": "zero2"}


def _targets(value: Any) -> Any:
    names = as_list(value)
    return "all-linear" if names == ["all"] else names


def _alpha(config: dict) -> Any:
    """2 x lora_rank"""
    return 2 * as_int(config.get("lora_rank", 8))


def _deepspeed(value: Any) -> Any:
    path = Path(str(value))
    if path.is_file():
        return str(path)
    if path.name in DS_PRESETS:
        return DS_PRESETS[path.name]
    raise ValueError(f"{value!r} is not a file here nor one of LLaMA-Factory's shipped configs "
                     f"({', '.join(DS_PRESETS)}: swiftbox's zero2 / zero3 / zero3_offload); ds_z0 is plain DDP: "
                     "remove deepspeed and set devices")


def _not(value: Any) -> bool:
    return not as_bool(value)


TABLE: list[Key] = [
    # model
    Key("model_name_or_path", note="the model: a hub id, a local dir or `toy`", how=READ),
    Key("trust_remote_code", "trust_remote_code", False, convert=as_bool),
    Key("adapter_name_or_path", how=REFUSE, note="continuing an adapter: give its directory as swiftbox's model"),
    Key("quantization_bit", how=READ, default=None, note="4 with finetuning_type lora = swiftbox method qlora "
        "(bitsandbytes NF4); 8 is refused (swiftbox's QLoRA is 4-bit)"),
    Key("quantization_method", how=REFUSE, accept=(None, "bitsandbytes", "bnb"), note="swiftbox's QLoRA loads "
        "with bitsandbytes only; remove it"),
    Key("double_quantization", how=REFUSE, accept=(None, True), note="swiftbox's QLoRA always double-quantizes"),
    Key("flash_attn", how=IGNORE, note="attention kernel: speed only; swiftbox picks the device's"),
    Key("enable_liger_kernel", how=IGNORE, note="fused kernels: speed only"),
    Key("use_unsloth", how=REFUSE, accept=(None, False), note="swiftbox trains with PEFT/TRL; remove it"),
    Key("rope_scaling", how=REFUSE, note="swiftbox trains the model's own context length"),
    Key("cache_dir", how=IGNORE, note="where the hub caches files"),
    # method
    Key("stage", how=READ, default="sft", note="pt | sft | dpo | kto | rm -> the step of the same kind (dpo with "
        "pref_loss orpo/simpo -> orpo/simpo); ppo and others are refused"),
    Key("do_train", how=REFUSE, accept=(None, True), note="only training configs are read; evaluate with swiftbox's "
        "eval step"),
    Key("do_eval", how=REFUSE, accept=(None, False), note="use swiftbox's eval step or eval_dataset"),
    Key("do_predict", how=REFUSE, accept=(None, False), note="use swiftbox's eval or chat step"),
    Key("finetuning_type", how=READ, default="lora", note="lora -> method lora (dora with use_dora, qlora with "
        "quantization_bit 4); full -> full; freeze is refused (train lora or full)"),
    Key("use_dora", how=READ, default=False, note="true -> method dora"),
    Key("lora_rank", "lora.rank", 8, convert=as_int),
    Key("lora_alpha", "lora.alpha", _alpha, convert=as_float),
    Key("lora_dropout", "lora.dropout", 0.0, convert=as_float),
    Key("lora_target", "lora.targets", "all", convert=_targets, note="all -> all-linear; names -> a list",
        inverse=lambda v: "all" if v == "all-linear" else ",".join(as_list(v))),
    Key("use_rslora", "lora.use_rslora", False, convert=as_bool),
    Key("additional_target", how=REFUSE, note="swiftbox trains LoRA on target modules only"),
    Key("pissa_init", how=REFUSE, accept=(None, False), note="use swiftbox's lora.init pissa_niter_N"),
    Key("pref_beta", "beta", 0.1, convert=as_float, kinds=PREF),
    Key("pref_loss", how=READ, default="sigmoid", note="sigmoid/ipo/hinge -> dpo loss_type; orpo -> the orpo step; "
        "simpo -> the simpo step"),
    Key("pref_ftx", how=REFUSE, accept=(None, 0), note="swiftbox's dpo has no SFT term; use the orpo step or simpo "
        "with cpo_alpha"),
    Key("dpo_label_smoothing", how=REFUSE, accept=(None, 0), note="not offered by swiftbox's dpo step"),
    Key("simpo_gamma", "gamma", 0.5, convert=as_float, kinds=("simpo",)),
    Key("kto_chosen_weight", "desirable_weight", 1.0, convert=as_float, kinds=("kto",)),
    Key("kto_rejected_weight", "undesirable_weight", 1.0, convert=as_float, kinds=("kto",)),
    Key("ref_model", how=REFUSE, note="swiftbox's reference is the starting model (or ref_adapter)"),
    Key("deepspeed", "deepspeed", convert=_deepspeed, note="examples/deepspeed/ds_z{2,3}[_offload]_config.json -> "
        "zero2 / zero3 / zero3_offload; another path is used as it is",
        inverse=lambda v: f"examples/deepspeed/ds_z{v[4]}{'_offload' if 'offload' in v else ''}_config.json"
        if v in ("zero2", "zero3", "zero3_offload") else v),
    # dataset
    Key("dataset", how=READ, note="names in dataset_dir/dataset_info.json -> their files (see below)"),
    Key("dataset_dir", how=READ, default="data", note="where dataset_info.json and the files are"),
    Key("template", how=READ, note="checked against the model's own chat template (swiftbox renders with that)"),
    Key("cutoff_len", how=READ, default=2048, note="-> max_length (pt: block_size)"),
    Key("max_samples", how=READ, note="kept only where every dataset has no more rows (then it selects nothing); "
        "else refused: swiftbox has no first-N selection (cut the file, or path#N samples N rows)"),
    Key("val_size", how=REFUSE, accept=(None, 0), note="swiftbox does not split a held-out set off the training "
        "data; give a file of its own as swiftbox's eval_dataset"),
    Key("eval_dataset", how=REFUSE, note="give the file as swiftbox's eval_dataset"),
    Key("packing", how=READ, note="unset or false -> swiftbox's default (exact padding-free packing: the same loss); "
        "true needs neat_packing (LLaMA-Factory's own packing lets samples attend to each other)"),
    Key("neat_packing", how=READ, default=False, note="with packing: swiftbox packing true"),
    Key("train_on_prompt", how=REFUSE, accept=(None, False), note="swiftbox trains on the replies only"),
    Key("mask_history", how=REFUSE, accept=(None, False), note="swiftbox trains every assistant reply"),
    Key("streaming", how=REFUSE, accept=(None, False), note="use swiftbox's streaming with max_steps"),
    Key("mix_strategy", how=REFUSE, accept=(None, "concat"), note="swiftbox concatenates datasets"),
    Key("overwrite_cache", how=IGNORE, note="preprocessing cache"),
    Key("preprocessing_num_workers", how=IGNORE, note="preprocessing speed"),
    Key("dataloader_num_workers", how=IGNORE, note="loading speed"),
    Key("tokenized_path", how=REFUSE, note="swiftbox tokenizes from the dataset files"),
    # output
    Key("output_dir", "output", note="default: swiftbox's runs/<name>/<step>"),
    Key("overwrite_output_dir", "force", False, convert=as_bool, note="replace an existing output"),
    Key("logging_steps", how=IGNORE, note="logging"),
    Key("save_steps", how=IGNORE, note="checkpoint cadence (swiftbox keeps its own for resume)"),
    Key("save_strategy", how=IGNORE, note="checkpoint cadence"),
    Key("save_total_limit", how=IGNORE, note="checkpoint housekeeping"),
    Key("save_only_model", how=IGNORE, note="checkpoint contents"),
    Key("plot_loss", how=IGNORE, note="swiftbox always writes loss.png"),
    Key("report_to", how=IGNORE, note="trackers (swiftbox: report_to)"),
    Key("run_name", how=IGNORE, note="tracker run name"),
    Key("logging_dir", how=IGNORE, note="tracker directory"),
    Key("ddp_timeout", how=IGNORE, note="process-group timeout"),
    Key("resume_from_checkpoint", how=REFUSE, accept=(None, False), note="swiftbox resumes its own checkpoints: "
        "resume: true on the same output"),
    # train
    Key("per_device_train_batch_size", "batch_size", 8, convert=as_int),
    Key("gradient_accumulation_steps", "grad_accum", 1, convert=as_int),
    Key("learning_rate", "learning_rate", 5e-5, convert=as_float),
    Key("num_train_epochs", "epochs", 3.0, convert=as_float),
    Key("max_steps", "max_steps", -1, convert=as_int),
    Key("lr_scheduler_type", "lr_scheduler", "linear"),
    Key("warmup_ratio", "warmup_ratio", 0.0, convert=as_float),
    Key("warmup_steps", how=REFUSE, accept=(None, 0), note="use warmup_ratio"),
    Key("weight_decay", "weight_decay", 0.0, convert=as_float),
    Key("seed", "seed", 42, convert=as_int),
    Key("bf16", how=READ, default=False, note="true -> dtype bfloat16"),
    Key("fp16", how=READ, default=False, note="true -> dtype float16; neither -> auto (the device's, as "
        "LLaMA-Factory infers it)"),
    Key("pure_bf16", how=REFUSE, accept=(None, False), note="swiftbox keeps trainable weights in float32; use bf16"),
    Key("disable_gradient_checkpointing", "gradient_checkpointing", False, convert=_not, inverse=_not,
        note="LLaMA-Factory checkpoints by default: gradient_checkpointing = not this"),
    Key("optim", how=REFUSE, accept=(None, "adamw_torch", "adamw_torch_fused"), note="swiftbox trains with "
        "transformers' AdamW; remove it"),
    Key("max_grad_norm", how=REFUSE, accept=(None, 1.0), note="swiftbox clips at 1.0 (transformers' default)"),
    Key("per_device_eval_batch_size", how=IGNORE, note="evaluation batching"),
    Key("eval_strategy", how=IGNORE, note="evaluation cadence"),
    Key("eval_steps", how=IGNORE, note="evaluation cadence"),
]

DATASET_KEYS = {"file_name", "formatting", "ranking", "columns", "tags", "num_samples", "split", "subset",
                "folder", "load_from", "hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name"}
# the dataset_info column / tag values swiftbox's readers take as they are (swiftbox/data/formats.py)
ALPACA_COLUMNS = {"prompt": ("instruction",), "query": ("input",), "response": ("output",), "system": ("system",),
                  "history": ("history",), "chosen": ("chosen",), "rejected": ("rejected",),
                  "kto_tag": ("kto_tag", "label"), "tools": ("tools",)}
SHAREGPT_COLUMNS = {"messages": ("conversations", "messages"), "system": ("system",), "tools": ("tools",),
                    "chosen": ("chosen",), "rejected": ("rejected",), "kto_tag": ("kto_tag", "label")}
SHAREGPT_TAGS = {"role_tag": ("from", "role"), "content_tag": ("value", "content"), "user_tag": ("human", "user"),
                 "assistant_tag": ("gpt", "assistant"), "observation_tag": ("observation", "tool"),
                 "function_tag": ("function_call", "tool_call"), "system_tag": ("system",)}


def kind_of(config: dict) -> str:
    stage = str(config.get("stage", "sft"))
    if stage not in STAGES:
        raise Refused(f"{NAME} stage {stage!r}: swiftbox has no such step (it reads stages "
                      f"{' | '.join(STAGES)}; for ppo use swiftbox's grpo step)")
    kind = STAGES[stage]
    if kind == "dpo":
        loss = str(config.get("pref_loss", "sigmoid"))
        if loss not in PREF_LOSSES:
            raise Refused(f"{NAME} pref_loss {loss!r}: swiftbox reads {' | '.join(PREF_LOSSES)}")
        kind = PREF_LOSSES[loss]
    return kind


def read(config: dict, ctx: Context) -> dict:
    out: dict[str, Any] = {"model": str(config["model_name_or_path"])}
    out["method"] = _method(config)
    out["dataset"] = datasets(config, ctx)
    length = as_int(config.get("cutoff_len", 2048))
    out["block_size" if ctx.kind == "pt" else "max_length"] = length
    bf16, fp16 = as_bool(config.get("bf16", False)), as_bool(config.get("fp16", False))
    if bf16 and fp16:
        raise Refused(f"{ctx.source}: {NAME} bf16 and fp16 are both true; pick one")
    out["dtype"] = "bfloat16" if bf16 else "float16" if fp16 else "auto"
    packing, neat = config.get("packing"), as_bool(config.get("neat_packing", False))
    if packing is not None and ctx.kind != "pt":
        if as_bool(packing) and ctx.kind != "sft":
            raise Refused(f"{ctx.source}: {NAME} packing true in stage {ctx.kind}: swiftbox packs sft rows only")
        if as_bool(packing) and not neat:
            raise Refused(f"{ctx.source}: {NAME} packing true without neat_packing lets packed samples attend to "
                          "each other; swiftbox packs exactly (set neat_packing: true, or remove packing)")
        if ctx.kind == "sft":
            out["packing"] = as_bool(packing)
    if ctx.kind == "dpo":
        out["loss_type"] = str(config.get("pref_loss", "sigmoid"))
    if config.get("template") is not None:
        templates.check(NAME, "template", str(config["template"]), out["model"], text_only=ctx.kind == "pt",
                        fetch=ctx.fetch)
    return out


def _method(config: dict) -> str:
    kind = str(config.get("finetuning_type", "lora"))
    bits = config.get("quantization_bit")
    if kind == "freeze":
        raise Refused(f"{NAME} finetuning_type 'freeze': swiftbox trains lora or full (freezing layers is not "
                      "offered); use lora")
    if kind not in ("lora", "full"):
        raise Refused(f"{NAME} finetuning_type {kind!r}: expected lora or full")
    if kind == "full":
        if bits is not None:
            raise Refused(f"{NAME} quantization_bit with finetuning_type full: a quantized model trains adapters only")
        return "full"
    dora = as_bool(config.get("use_dora", False))
    if bits is not None:
        if as_int(bits) != 4:
            raise Refused(f"{NAME} quantization_bit {bits}: swiftbox's QLoRA is 4-bit NF4; use 4 or remove it")
        if dora:
            raise Refused(f"{NAME} use_dora with quantization_bit: swiftbox offers qlora or dora, not both")
        return "qlora"
    return "dora" if dora else "lora"


def datasets(config: dict, ctx: Context) -> list[str]:
    names = as_list(config.get("dataset") or [])
    if not names:
        raise Refused(f"{ctx.source}: {NAME} dataset is missing: the dataset_info.json names to train on")
    folder = ctx.base / str(config.get("dataset_dir", "data"))
    info_path = folder / "dataset_info.json"
    if not info_path.is_file():
        raise Refused(f"{ctx.source}: {NAME} dataset_dir {folder}: no dataset_info.json there (it is read relative "
                      "to the working directory, as LLaMA-Factory does)")
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeError) as exc:
        raise Refused(f"{info_path}: not valid JSON ({exc})") from None
    max_samples = config.get("max_samples")
    out = []
    for name in names:
        entry = info.get(name) if isinstance(info, dict) else None
        if not isinstance(entry, dict):
            raise Refused(f"{ctx.source}: {NAME} dataset {name!r} is not in {info_path}")
        out.append(dataset_file(name, entry, folder, ctx, max_samples))
    return out


def dataset_file(name: str, entry: dict, folder: Path, ctx: Context, max_samples: Any = None) -> str:
    """One dataset_info.json entry -> the file swiftbox reads (path#N for num_samples); refused where swiftbox would
    read the file differently from LLaMA-Factory."""
    where = f"{NAME} dataset {name!r}"
    extra = sorted(set(entry) - DATASET_KEYS)
    if extra:
        raise Refused(f"{where}: dataset_info key {extra[0]!r} is not read by swiftbox")
    for hub in ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name"):
        if entry.get(hub) and not entry.get("file_name"):
            raise Refused(f"{where}: {hub} is a hub dataset; swiftbox trains on local files: download it and give "
                          "dataset_info a file_name")
    file_name = entry.get("file_name")
    if not file_name:
        raise Refused(f"{where}: no file_name in dataset_info.json")
    path = folder / str(file_name)
    if not path.is_file():
        raise Refused(f"{where}: {path} is not a file (swiftbox reads .json, .jsonl and .parquet files)")
    if path.suffix.lower() not in (".json", ".jsonl", ".parquet"):
        raise Refused(f"{where}: {path.name}: LLaMA-Factory reads a {path.suffix} file line by line; swiftbox reads "
                      ".json/.jsonl/.parquet (pt: jsonl with a text column)")
    formatting = entry.get("formatting", "alpaca")
    if formatting not in ("alpaca", "sharegpt"):
        raise Refused(f"{where}: formatting {formatting!r}: swiftbox reads alpaca and sharegpt")
    ranking = bool(entry.get("ranking", False))
    preference = ctx.kind in ("dpo", "orpo", "simpo", "rm")
    if ranking != preference:
        raise Refused(f"{where}: ranking {str(ranking).lower()} does not fit stage {ctx.kind} "
                      f"({'pairwise stages need' if preference else 'only dpo/rm stages take'} ranking: true)")
    columns = entry.get("columns") or {}
    if ctx.kind == "pt":
        allowed: dict[str, tuple[str, ...]] = {"prompt": ("text",)}
        if columns.get("prompt", "instruction") != "text":
            raise Refused(f"{where}: pt reads the column {columns.get('prompt', 'instruction')!r}; swiftbox's pt "
                          "reads a `text` column (rename it)")
    else:
        allowed = ALPACA_COLUMNS if formatting == "alpaca" else SHAREGPT_COLUMNS
    for role, column in columns.items():
        if role in ("images", "videos", "audios"):
            raise Refused(f"{where}: column {role}: swiftbox trains text models only")
        if role not in allowed or column not in allowed[role]:
            shown = " or ".join(allowed.get(role, ())) or "nothing"
            raise Refused(f"{where}: columns.{role} = {column!r}: swiftbox's reader takes {shown} there; rename the "
                          "column in the file")
    for tag, value in (entry.get("tags") or {}).items():
        if tag not in SHAREGPT_TAGS or value not in SHAREGPT_TAGS[tag]:
            raise Refused(f"{where}: tags.{tag} = {value!r}: swiftbox reads "
                          f"{' or '.join(SHAREGPT_TAGS.get(tag, ())) or 'no such tag'}; rename it in the file")
    spec = str(path)
    if max_samples is not None:
        from swiftbox.data.reading import read_file

        rows = len(read_file(path))
        if as_int(max_samples) < rows:
            raise Refused(f"{NAME} max_samples {max_samples}: keeps the first {max_samples} of {rows} rows of "
                          f"{name!r}; swiftbox has no first-N selection: cut the file, or use {path}#N (N rows "
                          "sampled at random)")
    if entry.get("num_samples") is not None:
        spec = f"{spec}#{as_int(entry['num_samples'])}"   # LLaMA-Factory: a random sample, repeated past the size
    return spec


PEER = Peer(name=NAME, slug="llamafactory", table=TABLE, kind_of=kind_of, read=read, model_key="model_name_or_path")


def detect(config: dict) -> bool:
    return "model_name_or_path" in config and ("stage" in config or "finetuning_type" in config
                                               or "dataset" in config)


def _describe(spec: str, kind: str) -> dict:
    """A dataset_info.json entry for a file swiftbox reads (by its first row's shape)."""
    from swiftbox.migrate.engine import first_row

    row = first_row(spec)
    pairwise = kind in ("dpo", "orpo", "simpo", "rm")
    label = next((c for c in ("kto_tag", "label") if c in row), None)
    entry: dict[str, Any] = {}
    if kind == "pt":
        if "text" not in row:
            raise Refused(f"export-config: {spec}: pt rows without a text column have no dataset_info description")
        return {"columns": {"prompt": "text"}}
    if "conversations" in row or "messages" in row:
        column = "conversations" if "conversations" in row else "messages"
        turns = row[column] if isinstance(row[column], list) else []
        entry = {"formatting": "sharegpt", "columns": {"messages": column}}
        if turns and isinstance(turns[0], dict) and "role" in turns[0]:
            entry["tags"] = {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                             "assistant_tag": "assistant"}
        for extra in ("system", "tools"):
            if extra in row:
                entry["columns"][extra] = extra
    elif "instruction" in row:
        entry = {"columns": {"prompt": "instruction", "query": "input", "response": "output"}}
        for extra in ("system", "history"):
            if extra in row:
                entry["columns"][extra] = extra
    else:
        raise Refused(f"export-config: {spec}: rows with {', '.join(sorted(row)[:5])} have no LLaMA-Factory "
                      "dataset_info description (alpaca instruction/input/output or sharegpt conversations/messages)")
    if pairwise:
        if "chosen" not in row or "rejected" not in row:
            raise Refused(f"export-config: {spec}: LLaMA-Factory's pairwise stages read chosen/rejected columns")
        entry["ranking"] = True
        entry["columns"].update(chosen="chosen", rejected="rejected")
        entry["columns"].pop("response", None)
    if kind == "kto":
        if label is None:
            raise Refused(f"export-config: {spec}: LLaMA-Factory's kto reads a kto_tag column")
        entry["columns"]["kto_tag"] = label
    return entry


def export(kind: str, model: str, config: dict, out: dict, data_dir: Any) -> dict:
    """The keys the table's `read` rows stand for, and dataset_info.json."""
    from swiftbox.data.reading import split_spec

    out.update({"model_name_or_path": model, "stage": "dpo" if kind in ("orpo", "simpo") else kind,
                "do_train": True})
    method = config.get("method", "lora")
    out["finetuning_type"] = "full" if method == "full" else "lora"
    if method == "dora":
        out["use_dora"] = True
    if method == "qlora":
        out["quantization_bit"] = 4
    if kind in ("orpo", "simpo"):
        out["pref_loss"] = kind
    elif kind == "dpo":
        loss = config.get("loss_type", "sigmoid")
        if PREF_LOSSES.get(loss) != "dpo":
            raise Refused(f"export-config: dpo loss_type {loss!r} has no LLaMA-Factory pref_loss")
        out["pref_loss"] = loss
    out["cutoff_len"] = config["block_size" if kind == "pt" else "max_length"]
    dtype = config.get("dtype", "auto")
    if dtype == "bfloat16":
        out["bf16"] = True
    elif dtype == "float16":
        out["fp16"] = True
    if config.get("packing") is not None and kind == "sft":
        out["packing"] = bool(config["packing"])
        if config["packing"]:
            out["neat_packing"] = True
    if config.get("eval_dataset"):
        raise Refused("export-config: eval_dataset has no LLaMA-Factory key (it splits val_size off the training "
                      "data instead)")
    info: dict[str, Any] = {}
    specs = config.get("dataset")
    for i, spec in enumerate([specs] if isinstance(specs, str) else specs or []):
        path, count = split_spec(spec)
        entry = {"file_name": str(path.resolve()), **_describe(spec, kind)}
        if count is not None:
            entry["num_samples"] = count
        info[f"{path.stem}_{i}"] = entry
    if data_dir is None:
        raise Refused("export-config --to llamafactory writes dataset_info.json beside the config: give --output")
    out["dataset"] = ",".join(info)
    out["dataset_dir"] = str(data_dir)
    return {"dataset_info.json": info}

"""ms-swift: its command lines (`swift sft|pt|rlhf|export|infer|deploy ...`, the same words after `./launch.sh`)
and its argument files (JSON/YAML of the same flag names), as swiftbox settings. Defaults are ms-swift's own
(swift/arguments: TunerArguments, TrainArguments, RLHFArguments, DataArguments, ModelArguments)."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Optional

from swiftbox.migrate import templates
from swiftbox.migrate.engine import Context, Imported, Peer, translate
from swiftbox.migrate.table import ABSENT, IGNORE, READ, REFUSE, Key, Refused, as_bool, as_float, as_int, as_list

NAME = "ms-swift"
RLHF = {"dpo": "dpo", "kto": "kto", "orpo": "orpo", "simpo": "simpo", "rm": "rm"}
TRAIN = ("sft", "pt", "dpo", "kto", "orpo", "simpo", "rm")
PREF = ("dpo", "kto", "orpo", "simpo")
COMMANDS = ("sft", "pt", "rlhf", "export", "infer", "deploy")   # `swift COMMAND` -> `./launch.sh COMMAND`
BETA = {"dpo": 0.1, "kto": 0.1, "orpo": 0.1, "simpo": 2.0}
BACKENDS = {"pt": "builtin", "transformers": "builtin", "vllm": "vllm"}


def _lr(config: dict) -> float:
    """1e-4 (lora), 1e-5 (full)"""
    return 1e-5 if str(config.get("tuner_type", config.get("train_type", "lora"))) == "full" else 1e-4


def _accum(config: dict) -> int:
    """ceil(16 / per_device_train_batch_size) on one process"""
    return max(1, math.ceil(16 / as_int(config.get("per_device_train_batch_size", 1))))


def _beta(config: dict) -> Any:
    """0.1 (dpo, kto, orpo), 2.0 (simpo)"""
    return BETA.get(RLHF.get(str(config.get("rlhf_type", "dpo")), ""), ABSENT)


def _targets(value: Any) -> Any:
    names = as_list(value)
    return "all-linear" if names == ["all-linear"] else names


def _one_or_list(value: Any) -> Any:
    names = as_list(value)
    return names[0] if len(names) == 1 else names


def _deepspeed(value: Any) -> Any:
    if str(value) in ("zero2", "zero3", "zero3_offload") or Path(str(value)).is_file():
        return str(value)
    raise ValueError(f"{value!r}: expected zero2, zero3, zero3_offload or a .json file here (zero0 / zero2_offload "
                     "are not offered)")


TABLE: list[Key] = [
    Key("model", how=READ, note="a ModelScope id (hf:ORG/NAME with use_hf), a local dir or `toy`"),
    Key("use_hf", how=READ, default=False, note="true: the model id is Hugging Face's (swiftbox hf:ORG/NAME)"),
    Key("model_type", how=IGNORE, note="swiftbox reads the architecture from config.json"),
    Key("trust_remote_code", "trust_remote_code", False, convert=as_bool, note="swiftbox's own switch (ms-swift "
        "always runs a model's own code): off, a model that needs its code is refused by the loader, naming this"),
    Key("tuner_type", how=READ, default="lora", aliases=("train_type",),
        note="lora -> method lora (dora with use_dora; qlora with quant_bits 4 + quant_method bnb); full -> full; "
        "other tuners are refused"),
    Key("use_dora", how=READ, default=False, note="true -> method dora"),
    Key("quant_bits", how=READ, note="train: 4 with quant_method bnb -> qlora; export: quantize bits"),
    Key("quant_method", how=READ, note="train: bnb (qlora); export: gptq | awq | bnb | fp8 -> quantize method"),
    Key("torch_dtype", how=READ, note="-> dtype; unset -> auto (ms-swift: from the model's config where the device "
        "supports it; swiftbox: the device's dtype policy)"),
    Key("lora_rank", "lora.rank", 8, convert=as_int, kinds=TRAIN),
    Key("lora_alpha", "lora.alpha", 32, convert=as_float, kinds=TRAIN),
    Key("lora_dropout", "lora.dropout", 0.05, convert=as_float, kinds=TRAIN),
    Key("target_modules", "lora.targets", ["all-linear"], convert=_targets, kinds=TRAIN,
        inverse=lambda v: [v] if isinstance(v, str) else v),
    Key("use_rslora", "lora.use_rslora", False, convert=as_bool, kinds=TRAIN),
    Key("lora_bias", how=REFUSE, accept=(None, "none"), note="swiftbox trains no biases"),
    Key("init_weights", how=REFUSE, accept=(None, "true", True), note="use swiftbox's lora.init"),
    Key("num_train_epochs", "epochs", 3.0, convert=as_float, kinds=TRAIN),
    Key("max_steps", "max_steps", -1, convert=as_int, kinds=TRAIN),
    Key("per_device_train_batch_size", "batch_size", 1, convert=as_int, kinds=TRAIN),
    Key("gradient_accumulation_steps", "grad_accum", _accum, convert=as_int, kinds=TRAIN),
    Key("learning_rate", "learning_rate", _lr, convert=as_float, kinds=TRAIN),
    Key("lr_scheduler_type", "lr_scheduler", "cosine", kinds=TRAIN),
    Key("warmup_ratio", "warmup_ratio", 0.0, convert=as_float, kinds=TRAIN),
    Key("warmup_steps", how=REFUSE, accept=(None, 0), note="use warmup_ratio"),
    Key("weight_decay", "weight_decay", 0.1, convert=as_float, kinds=TRAIN),
    Key("seed", "seed", 42, convert=as_int, kinds=TRAIN),
    Key("data_seed", how=REFUSE, accept=(None, 42), note="swiftbox shuffles with seed; set seed instead"),
    Key("gradient_checkpointing", "gradient_checkpointing", True, convert=as_bool, kinds=TRAIN),
    Key("max_length", how=READ, note="-> max_length (pt: block_size); unset: the model's max_model_len "
        "(max_position_embeddings), as ms-swift"),
    Key("dataset", how=READ, note="local files; path#N samples N rows (as ms-swift); hub dataset ids are refused"),
    Key("val_dataset", "eval_dataset", convert=_one_or_list, kinds=TRAIN, note="local files"),
    Key("split_dataset_ratio", how=REFUSE, accept=(None, 0), note="swiftbox does not split a held-out set off the "
        "training data; give a file of its own with val_dataset"),
    Key("template", how=READ, note="checked against the model's own chat template (swiftbox renders with that)"),
    Key("system", how=REFUSE, note="swiftbox takes the system prompt from the data (a system column or turn) or "
        "the model's template; put it in the data"),
    Key("output_dir", "output", note="default: swiftbox's runs/<name>/<step> (ms-swift: output/<model>/vN-...)"),
    Key("add_version", how=IGNORE, note="ms-swift's versioned output subdirectory"),
    Key("packing", how=READ, note="true -> packing true; false/unset -> swiftbox's default (exact packing: the "
        "same loss)"),
    Key("padding_free", how=IGNORE, note="exact padding-free batching: speed only"),
    Key("attn_impl", how=IGNORE, note="attention kernel: speed only"),
    Key("use_liger_kernel", how=IGNORE, note="fused kernels: speed only"),
    Key("deepspeed", "deepspeed", convert=_deepspeed, kinds=TRAIN),
    Key("optimizer", how=REFUSE, note="swiftbox trains with transformers' AdamW; remove it"),
    Key("max_grad_norm", how=REFUSE, accept=(None, 1.0), note="swiftbox clips at 1.0"),
    Key("resume_from_checkpoint", how=REFUSE, note="swiftbox resumes its own checkpoints: resume: true on the same "
        "output"),
    Key("streaming", how=REFUSE, accept=(None, False), note="use swiftbox's streaming with max_steps"),
    Key("rlhf_type", how=READ, default="dpo", note="dpo | kto | orpo | simpo | rm -> the step of the same kind; "
        "grpo and gkd are refused (their ms-swift defaults are not mapped: use swiftbox's grpo / gkd steps), cpo and "
        "ppo too"),
    Key("beta", "beta", _beta, convert=as_float, kinds=PREF),
    Key("loss_type", "loss_type", "sigmoid", kinds=("dpo",)),
    Key("rpo_alpha", how=REFUSE, note="swiftbox's dpo has no SFT term; use the orpo step, or simpo with cpo_alpha"),
    Key("simpo_gamma", "gamma", 1.0, convert=as_float, kinds=("simpo",)),
    Key("cpo_alpha", "cpo_alpha", 1.0, convert=as_float, kinds=("simpo",)),
    Key("desirable_weight", "desirable_weight", 1.0, convert=as_float, kinds=("kto",)),
    Key("undesirable_weight", "undesirable_weight", 1.0, convert=as_float, kinds=("kto",)),
    Key("center_rewards_coefficient", "center_rewards", convert=as_float, kinds=("rm",)),
    Key("per_device_eval_batch_size", how=IGNORE, note="evaluation batching"),
    Key("eval_steps", how=IGNORE, note="evaluation cadence"),
    Key("save_steps", how=IGNORE, note="checkpoint cadence (swiftbox keeps its own for resume)"),
    Key("save_total_limit", how=IGNORE, note="checkpoint housekeeping"),
    Key("save_only_model", how=IGNORE, note="checkpoint contents"),
    Key("logging_steps", how=IGNORE, note="logging"),
    Key("logging_first_step", how=IGNORE, note="logging"),
    Key("report_to", how=IGNORE, note="trackers (swiftbox: report_to)"),
    Key("dataset_num_proc", how=IGNORE, note="preprocessing speed"),
    Key("dataloader_num_workers", how=IGNORE, note="loading speed"),
    Key("load_from_cache_file", how=IGNORE, note="preprocessing cache"),
    Key("model_author", how=IGNORE, note="fills swift/self-cognition's placeholders only (a hub dataset swiftbox "
        "does not fetch)"),
    Key("model_name", how=IGNORE, note="fills swift/self-cognition's placeholders only"),
    # export / infer / deploy
    Key("adapters", how=READ, note="train: refused (continue an adapter: give it as model); export/infer/deploy: "
        "the adapter directories"),
    Key("merge_lora", how=READ, default=False, note="export: true -> the merge step"),
    Key("max_shard_size", "max_shard_size", "5GB", kinds=("merge", "quantize")),
    Key("infer_backend", how=READ, note="deploy: pt/transformers -> engine builtin, vllm -> vllm"),
    Key("port", "port", 8000, convert=as_int, kinds=("serve",)),
    Key("host", "host", "0.0.0.0", kinds=("serve",), note="ms-swift binds every interface by default; swiftbox "
        "then needs an API key (--api_key) or refuses"),
    Key("api_key", "api_key", kinds=("serve", "chat")),
    Key("served_model_name", "served_model_name", kinds=("serve",)),
    Key("max_model_len", "max_model_len", convert=as_int, kinds=("serve",)),
    Key("max_new_tokens", "max_tokens", convert=as_int, kinds=("chat",)),
    Key("temperature", "temperature", convert=as_float, kinds=("chat",)),
    Key("stream", how=IGNORE, note="the terminal chat streams either way"),
]


def _command_kind(command: str, config: dict) -> str:
    if command in ("sft", "pt"):
        return command
    if command == "rlhf":
        rlhf = str(config.get("rlhf_type", "dpo"))
        if rlhf not in RLHF:
            hint = (f"; swiftbox's own {rlhf} step has its own flags and defaults (docs/training.md)"
                    if rlhf in ("grpo", "gkd") else "")
            raise Refused(f"{NAME} rlhf_type {rlhf!r}: not read from ms-swift's flags (it reads "
                          f"{' | '.join(RLHF)}){hint}")
        return RLHF[rlhf]
    if command == "export":
        merge = as_bool(config.get("merge_lora", False))
        quant = config.get("quant_method") is not None
        if merge and quant:
            raise Refused(f"{NAME} export with merge_lora and quant_method: run export twice (merge, then quantize "
                          "the merged output)")
        if not merge and not quant:
            raise Refused(f"{NAME} export: swiftbox exports with merge_lora true (merge) or quant_method (quantize)")
        return "merge" if merge else "quantize"
    if command == "infer":
        return "chat"
    if command == "deploy":
        return "serve"
    raise Refused(f"{NAME} command {command!r}: swiftbox reads {' | '.join(COMMANDS)}")


def kind_of(config: dict) -> str:
    """An argument file: rlhf_type -> rlhf, else sft."""
    return _command_kind("rlhf" if "rlhf_type" in config else "sft", config)


def read(config: dict, ctx: Context) -> dict:
    kind = ctx.kind
    model = str(config["model"])
    if as_bool(config.get("use_hf", False)) and not model.startswith("hf:") and not Path(model).exists():
        model = "hf:" + model
    out: dict[str, Any] = {"model": model}
    adapters = as_list(config["adapters"]) if config.get("adapters") is not None else []
    if kind in TRAIN:
        if adapters:
            raise Refused(f"{ctx.source}: {NAME} adapters: continuing an adapter: give its directory as --model")
        out["method"] = _method(config)
        out["dataset"] = _datasets(config, ctx)
        out["max_length" if kind != "pt" else "block_size"] = _max_length(config, model, ctx)
        if config.get("packing") is not None and kind == "sft":
            out["packing"] = as_bool(config["packing"])
        elif config.get("packing") is not None and as_bool(config["packing"]):
            raise Refused(f"{ctx.source}: {NAME} packing true with {kind}: swiftbox packs sft rows only")
    if config.get("torch_dtype") is not None or kind in TRAIN:
        dtype = str(config.get("torch_dtype") or "auto")
        if dtype not in ("auto", "bfloat16", "float16", "float32"):
            raise Refused(f"{NAME} torch_dtype {dtype!r}: expected bfloat16, float16 or float32")
        out["dtype"] = dtype
    if kind == "merge":
        if not adapters:
            raise Refused(f"{ctx.source}: {NAME} export --merge_lora true needs --adapters DIR")
        out["adapters"] = adapters
        out["model"] = adapters[0]
        out["base"] = model if config.get("model") and model != adapters[0] else None
        if out["base"] is None:
            out.pop("base")
    elif kind == "quantize":
        out.update(_quantize(config))
    elif kind in ("chat", "serve"):
        if adapters:
            out["adapters"] = {f"adapter{i}" if len(adapters) > 1 else "lora": a for i, a in enumerate(adapters)}
        backend = config.get("infer_backend")
        if backend is not None:
            if str(backend) not in BACKENDS:
                raise Refused(f"{NAME} infer_backend {backend!r}: swiftbox serves with pt (built-in) or vllm")
            if kind == "serve":
                out["engine"] = BACKENDS[str(backend)]
    if config.get("template") is not None:
        templates.check(NAME, "template", str(config["template"]), model, text_only=kind == "pt", fetch=ctx.fetch)
    return out


def _method(config: dict) -> str:
    tuner = str(config.get("tuner_type", config.get("train_type", "lora")))
    if tuner not in ("lora", "full"):
        raise Refused(f"{NAME} tuner_type {tuner!r}: swiftbox trains lora (and dora, qlora) or full")
    bits, quant = config.get("quant_bits"), config.get("quant_method")
    dora = as_bool(config.get("use_dora", False))
    if bits is not None or quant is not None:
        if tuner != "lora" or str(quant) != "bnb" or bits is None or as_int(bits) != 4 or dora:
            raise Refused(f"{NAME} quant_bits {bits} / quant_method {quant}: swiftbox trains a quantized model as "
                          "qlora only (tuner_type lora, quant_method bnb, quant_bits 4)")
        return "qlora"
    return "full" if tuner == "full" else "dora" if dora else "lora"


def _datasets(config: dict, ctx: Context) -> Any:
    specs = as_list(config.get("dataset") or [])
    if not specs:
        raise Refused(f"{ctx.source}: {NAME} dataset is missing")
    out = []
    for spec in specs:
        path, _, count = str(spec).rpartition("#") if "#" in str(spec) else (str(spec), "", "")
        if not (ctx.base / path).is_file() and not Path(path).is_file():
            raise Refused(f"{ctx.source}: {NAME} dataset {spec!r}: not a local file; swiftbox trains on local files "
                          "(download a hub dataset and give its path)")
        out.append(str(spec))
    return out[0] if len(out) == 1 else out


def _max_length(config: dict, model: str, ctx: Context) -> int:
    if config.get("max_length") is not None:
        return as_int(config["max_length"])
    from swiftbox.migrate.templates import model_config

    found = model_config(model, ctx.fetch).get("max_position_embeddings")
    if not isinstance(found, int):
        raise Refused(f"{ctx.source}: {NAME} max_length is unset and {model}'s max_model_len cannot be read here; "
                      "set --max_length")
    return found


def _quantize(config: dict) -> dict:
    method = str(config.get("quant_method"))
    if method not in ("gptq", "awq", "bnb", "fp8"):
        raise Refused(f"{NAME} quant_method {method!r}: swiftbox quantizes with gptq, awq, bnb or fp8")
    bits = as_int(config["quant_bits"]) if config.get("quant_bits") is not None else None
    out: dict[str, Any] = {"method": method}
    if bits is not None:
        out["bits"] = bits
    if config.get("dataset") is not None:
        out["dataset"] = _one_or_list(config["dataset"])
    return out


PEER = Peer(name=NAME, slug="ms-swift", table=TABLE, kind_of=kind_of, read=read, model_key="model")


def detect(config: dict) -> bool:
    return "model" in config and bool({"train_type", "tuner_type", "rlhf_type", "torch_dtype", "num_train_epochs",
                                       "per_device_train_batch_size", "lora_rank"} & set(config))


def parse_argv(argv: list[str]) -> dict:
    """`--key value [value ...]` / `--key=value` -> {key: value or [values]} (ms-swift's own spelling: underscores)."""
    out: dict[str, Any] = {}
    key: Optional[str] = None
    for token in argv:
        if token.startswith("--"):
            name, eq, value = token[2:].partition("=")
            key = name.replace("-", "_")
            if key in out:
                raise Refused(f"{NAME} --{key} is given twice")
            out[key] = [value] if eq else []
        elif key is None:
            raise Refused(f"{NAME}: unexpected {token!r} before the first --flag")
        else:
            out[key].append(token)
    parsed: dict[str, Any] = {}
    for name, values in out.items():
        parsed[name] = True if not values else values[0] if len(values) == 1 and name != "dataset" else values
    return parsed


def translate_argv(command: str, argv: list[str], *, fetch: bool = True) -> Imported:
    """`./launch.sh COMMAND ARGS` with ms-swift's flags -> Imported (a one-step recipe)."""
    config = parse_argv(argv)
    if command in ("infer", "deploy", "export") and "model" not in config and config.get("adapters"):
        adapters = as_list(config["adapters"])     # an adapter directory knows its base (its swiftbox.json)
        config["model"] = adapters[0]
        if command != "export" and len(adapters) == 1:
            del config["adapters"]
    kind = _command_kind(command, config)
    peer = dataclasses.replace(PEER, kind_of=lambda _config: kind)
    return translate(peer, config, f"{command} (ms-swift flags)", name=f"{command}-cli", fetch=fetch)


def uses_own_flags(argv: list[str], swiftbox_flags: set[str]) -> bool:
    """Whether a command line speaks ms-swift: a flag of ms-swift's table that is not one of swiftbox's own."""
    names = {t[2:].partition("=")[0] for t in argv if t.startswith("--")}
    ours = {n for n in names if n in swiftbox_flags or n.replace("_", "-") in swiftbox_flags}
    keys = PEER.keys()
    return any(n.replace("-", "_") in keys for n in names - ours)


def export(kind: str, model: str, config: dict, out: dict, data_dir: Any) -> dict:
    """The keys the table's `read` rows stand for (an argument file: rlhf_type for the preference steps)."""
    if kind == "pt":
        raise Refused("export-config: an ms-swift argument file reads as sft or rlhf; run pt with "
                      "`./launch.sh pt` and ms-swift's flags")
    out["model"] = model
    if kind != "sft":
        out["rlhf_type"] = kind
    method = config.get("method", "lora")
    out["tuner_type"] = "full" if method == "full" else "lora"
    if method == "dora":
        out["use_dora"] = True
    if method == "qlora":
        out.update(quant_method="bnb", quant_bits=4)
    specs = config.get("dataset")
    out["dataset"] = [specs] if isinstance(specs, str) else list(specs or [])
    out["max_length"] = config["max_length"]
    if config.get("dtype", "auto") != "auto":
        out["torch_dtype"] = config["dtype"]
    if config.get("packing"):
        out["packing"] = True
    elif config.get("packing") is False:
        out["packing"] = False
    if config.get("eval_dataset"):
        out["val_dataset"] = config["eval_dataset"]
    return {}

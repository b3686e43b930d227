"""Load the model a training step starts from, ready to train: LoRA / DoRA adapters, QLoRA
(bitsandbytes NF4 + prepare_model_for_kbit_training) or full fine-tuning.

An input that is an adapter artifact is continued: earlier adapters in its chain are merged in and
the last one is loaded trainable (so DPO after SFT trains the SFT adapter further).

`reward_head=True` (the rm step) loads a sequence-classification model with one output instead (a new `score`
head on the same body): an input adapter chain is merged in and a fresh adapter is trained, its task type
SEQ_CLS so PEFT trains and saves the whole head too (modules_to_save).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from swiftbox.device import Platform
from swiftbox.errors import UserError
from swiftbox.modeling.loading import (
    ModelSpec,
    adapter_base_ref,
    apply_adapters,
    load_tokenizer,
    merge_into,
    resolve_spec,
    torch_dtype,
)
from swiftbox.steps import TrainBase
from swiftbox.training.distributed.args import check_distributed

if TYPE_CHECKING:
    from swiftbox.contract import StepContext
    from swiftbox.device.dtype_policy import DtypePlan


@dataclass
class TrainModel:
    model: Any                 # a PeftModel (lora/qlora/dora) or the plain model (full)
    tokenizer: Any
    spec: ModelSpec
    base_ref: str              # what the trained adapter sits on (for its manifest)
    continued: Optional[str]   # the adapter artifact training continues from, if any
    save_dtype: Optional[str] = None   # full fine-tuning: cast the float32 master weights back to this to save
    initial_adapter: Optional[dict] = None   # PiSSA / OLoRA: the adapter's start, for the conversion when saving


def dtype_plan(cfg: TrainBase, ctx: StepContext) -> DtypePlan:
    """The training steps' dtypes (swiftbox/device/dtype_policy.py): the platform's compute dtype; adapters saved in
    float32, full fine-tuning in the compute dtype."""
    from swiftbox.device import dtype_policy

    return dtype_policy.training(ctx.platform, cfg.dtype, full=cfg.method == "full")


def check_training(cfg: TrainBase, platform: Platform, input: str, *, reward_head: bool = False,
                   row_files: bool = True) -> None:
    """The training pipelines' `check`: refuse a method this platform cannot run (QLoRA on NPU: exit 3
    naming LoRA), the distributed combinations known not to work, trackers not installed (report_to), an input
    this step cannot train (`trainable_input`) and a dataset file that is not there, before any output or torchrun
    start. An adapter no engine will
    serve attached (rank above the runtime cap) is trained, with one line saying so."""
    import sys

    from swiftbox.modeling.adapter_file import rank_problem
    from swiftbox.training import tracking

    if cfg.method == "qlora":
        platform.require("qlora-bnb")
    too_big = rank_problem(cfg.lora.rank) if cfg.method != "full" else None
    if too_big:
        print(f"warning: lora.rank {cfg.lora.rank}: {too_big}; serve it merged (merge step) or train a smaller rank",
              file=sys.stderr, flush=True)
    check_distributed(cfg, platform)
    tracking.check(cfg, platform)
    trainable_input(input, cfg, platform, reward_head=reward_head)
    if row_files and not getattr(cfg, "streaming", False):   # pt reads text files, streaming sft checks its own
        dataset_files(cfg)


def dataset_files(cfg: TrainBase) -> None:
    """Every row file `dataset` / `eval_dataset` names exists (exit 2 before any output; the rows themselves are
    read, and a bad one refused, by the flow's `read`, before any weights load)."""
    from swiftbox.data.reading import split_spec

    for name in ("dataset", "eval_dataset"):
        value = getattr(cfg, name)
        for spec in [value] if isinstance(value, str) else value or []:
            path, _ = split_spec(spec)
            if not path.is_file():
                raise UserError(f"{name} {path}: file not found; expected a .jsonl, .json or .parquet file")


def trainable_input(ref: str, cfg: TrainBase, platform: Platform, *, reward_head: bool = False) -> ModelSpec:
    """The input resolved (fetched once, here) and every refusal that depends on it, from its files alone (no
    weights load): a quantized export (exit 2), a family swiftbox cannot train (exit 3), `packing: true` where
    packing is not exact for its model_type (exit 2), a new LoRA initialisation asked of an adapter this step
    continues (exit 2). The step's `check` calls it before any output exists; `load_for_training` again for the spec."""
    spec = resolve_spec(ref)
    if spec.quantized:
        raise UserError(f"model {ref}: a {spec.quantized}-quantized export cannot be fine-tuned; train on its base "
                        f"model (method: qlora quantizes on the fly)")
    refuse_family(spec.base)
    from swiftbox.training.arguments import batching

    batching(cfg, platform, config_model_type(spec.base))        # exit 2: packing: true where not exact
    continues = bool(spec.adapters) and cfg.method != "full" and not reward_head
    if continues and (cfg.lora.init != "default" or cfg.lora.use_rslora):
        what = f"lora.init {cfg.lora.init}" if cfg.lora.init != "default" else "lora.use_rslora"
        raise UserError(f"{what}: the input {ref} is an adapter, which this step trains further as it is; a new "
                        "initialisation applies to a fresh adapter on a base model (drop it, or start from the base)")
    return spec


def quantization_config(cfg: TrainBase, dtype: str, platform: Platform) -> Any:
    if cfg.method != "qlora":
        return None
    platform.require("qlora-bnb")
    from transformers import BitsAndBytesConfig

    from swiftbox.training.distributed.args import quantization_extra

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch_dtype(dtype), **quantization_extra(cfg, torch_dtype(dtype)))


def lora_config(cfg: TrainBase, task_type: str = "CAUSAL_LM") -> Any:
    from peft import LoraConfig

    from swiftbox.training.lora_init import peft_kwargs

    targets = cfg.lora.targets
    return LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=targets, use_dora=cfg.method == "dora", task_type=task_type,
                      **peft_kwargs(cfg.lora))


def config_model_type(base: object) -> str:
    """The model_type in the config.json of a local model directory ('' when there is none to read)."""
    import json
    from pathlib import Path

    try:
        return str(json.loads((Path(str(base)) / "config.json").read_text(encoding="utf-8")).get("model_type", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def refuse_family(base: object) -> None:
    """Exit 3 for a model family swiftbox cannot train (catalog.presets.TRAINING_REFUSED), by its config's
    model_type, before any weights load."""
    from swiftbox.catalog.presets import training_refusal
    from swiftbox.errors import Unsupported

    reason = training_refusal(config_model_type(base))
    if reason:
        raise Unsupported(reason)


def load_for_training(ref: str, cfg: TrainBase, platform: Platform, dtype: str, *,
                      reward_head: bool = False, unpadded: bool = False) -> TrainModel:
    """The model `ref` names, ready for this step to train (its refusals are `trainable_input`'s, which `check`
    ran before any output existed). `unpadded`: the step runs its padded batches as packed rows where that is exact
    (the preference steps, training/unpadded.py), so the model attends per sample as a packing SFT step's does."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from swiftbox.training.arguments import batching, unpadded_preference

    spec = trainable_input(ref, cfg, platform, reward_head=reward_head)
    model_type = config_model_type(spec.base)
    packed = batching(cfg, platform, model_type)[0] or (unpadded and unpadded_preference(platform, model_type))
    qconf = quantization_config(cfg, dtype, platform)
    tokenizer = load_tokenizer(spec, trust_remote_code=cfg.trust_remote_code)
    from swiftbox.training.distributed.args import model_device_map

    # Full fine-tuning keeps float32 master weights and computes in `dtype` under the trainer's autocast: with
    # bf16 weights AdamW's small updates round away (on an H100 the quickstart's SFT stalled at 0.53 accuracy
    # where float32 reaches 1.0), and fp16 weights cannot be unscaled at all. Adapters are float32 already (PEFT).
    master = cfg.method == "full" and dtype in ("bfloat16", "float16")
    kwargs = dict(dtype=torch_dtype("float32" if master else dtype), trust_remote_code=cfg.trust_remote_code,
                  use_safetensors=True, attn_implementation=platform.attn_implementation(packed))
    device_map = model_device_map(cfg, platform)      # each rank its local device; None under ZeRO-3 / FSDP
    if device_map is not None:
        kwargs["device_map"] = device_map
    if qconf is not None:
        kwargs["quantization_config"] = qconf
    if reward_head:
        kwargs["num_labels"] = 1
    auto = AutoModelForSequenceClassification if reward_head else AutoModelForCausalLM
    try:
        model = auto.from_pretrained(spec.base, **kwargs)
    except OSError as exc:
        raise UserError(f"{spec.base}: cannot load model ({str(exc).splitlines()[0]})") from None
    if packed:      # hybrid linear-attention / Mamba-2 / short-conv mixers run once per packed sample
        from swiftbox.compat import hybrid_mixers_per_sample

        hybrid_mixers_per_sample(model, config_model_type(spec.base))
    if qconf is not None:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg.gradient_checkpointing)
    if getattr(model, "generation_config", None) is not None and tokenizer.pad_token_id is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if reward_head:
        model.config.pad_token_id = tokenizer.pad_token_id    # the head reads the last token before the padding

    base_ref, continued = ref, None
    adapters = list(spec.adapters)
    if adapters:
        keep_last = cfg.method != "full" and not reward_head   # full FT / a new head train the merged weights
        if reward_head:
            model = merge_into(model, adapters)
        else:
            model = apply_adapters(model, adapters, merge_all=not keep_last, trainable=keep_last)
        if keep_last:
            continued = str(adapters[-1])
            base_ref = adapter_base_ref(adapters[-1])
    initial = None
    if cfg.method != "full" and continued is None:
        from peft import get_peft_model
        from transformers import set_seed

        from swiftbox import logs
        from swiftbox.training.lora_init import snapshot

        set_seed(cfg.seed)            # the adapter's initial weights follow the step's seed, not earlier steps

        try:
            with logs.captured(f"LoRA init {cfg.lora.init}"):
                model = get_peft_model(model, lora_config(cfg, "SEQ_CLS" if reward_head else "CAUSAL_LM"),
                                       low_cpu_mem_usage=cfg.lora.init == "eva")   # EVA makes the weights
        except ValueError as exc:  # PEFT's refusal of the settings, e.g. target modules the model does not have
            raise UserError(f"lora.targets {cfg.lora.targets!r}: {' '.join(str(exc).split())[:300]}") from None
        initial = snapshot(model, cfg.lora)
    # No KV cache while training: besides wasting memory, a cache makes transformers skip the packed-sequence
    # detection from position_ids, and padding-free batches would then attend across sample boundaries.
    model.config.use_cache = False
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    return TrainModel(model=model, tokenizer=tokenizer, spec=spec, base_ref=base_ref, continued=continued,
                      save_dtype=dtype if master else None, initial_adapter=initial)


def trainable_parameters(model: Any) -> tuple[int, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total

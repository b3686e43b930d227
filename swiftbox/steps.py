"""Typed configs for every step kind: the one schema shared by recipes, the CLI and the Python API.

A recipe step `- sft: {...}`, `./launch.sh sft --lora.rank 8 ...` and `swiftbox.sft(lora={"rank": 8})`
all validate through the classes here. Field descriptions double as CLI help.

Every number is finite (`allow_inf_nan=False`) and bounded: `--epochs inf` or `--lora.alpha 1e300` would
train to NaN weights, so they are refused here as bad input (exit 2) before any work starts.
"""
from __future__ import annotations

import os
import re
from typing import Any, Literal, Optional, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from swiftbox import quant_methods, template_switches
from swiftbox.device.devices import DevicesField

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
DTYPE_NAMES: tuple[str, ...] = get_args(Dtype)[1:]      # the concrete compute dtypes


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


BIG = 10**9                      # upper bound of counts (steps, rows, tokens) that have no natural one
MAX_SEED = 2**32 - 1             # numpy / torch seeds
# transformers' SchedulerType values (tests/unit/test_bad_input.py checks this list against the installed library)
LrScheduler = Literal["linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                      "inverse_sqrt", "reduce_lr_on_plateau", "cosine_with_min_lr", "cosine_warmup_with_min_lr",
                      "warmup_stable_decay", "greedy"]
LR_SCHEDULERS: tuple[str, ...] = get_args(LrScheduler)
SIZE_RE = re.compile(r"^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)\s*$", re.IGNORECASE)


class StepBase(Strict):
    model: Optional[str] = Field(None, description="input model: toy, a ModelScope id, hf:ORG/NAME, a local dir, an "
                                                   "artifact dir, or in a recipe @KIND (@KIND-2, ...) for an earlier "
                                                   "step's model; default: the previous step's output")
    output: Optional[str] = Field(None, description="output directory; default runs/<recipe>/<step>")
    force: bool = Field(False, description="replace an existing output directory")
    trust_remote_code: bool = Field(False, description="allow model repos to run their own python code")

    @field_validator("output")
    @classmethod
    def _output(cls, value: Any) -> Any:
        """`~/x` means the home directory; an output that holds the working directory could be wiped by force."""
        if value is None:
            return value
        if not value.strip():
            raise ValueError("expected a directory path, got an empty string")
        path = os.path.abspath(os.path.expanduser(value))
        if path == os.path.dirname(path) or os.path.commonpath([path, os.getcwd()]) == path:
            raise ValueError(f"{value!r} is the working directory or one of its parents; choose a new directory")
        return os.path.expanduser(value)


LORA_INITS = ("default", "gaussian", "pissa", "olora", "eva")    # PEFT init_lora_weights offered (+ pissa_niter_N)
EVA_STEPS = ("sft", "pt", "gkd")    # the steps whose rows are token ids EVA can run the model on


class LoraConfig(Strict):
    rank: int = Field(8, ge=1, le=4096, description="LoRA rank r")
    alpha: float = Field(16, gt=0, le=65536, description="LoRA alpha (scaling = alpha / rank)")
    dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout")
    targets: Union[str, list[str]] = Field("all-linear", description="target modules: all-linear or a list of names")
    init: str = Field("default", description="initialisation (PEFT init_lora_weights): default (B = 0) | gaussian | "
                      "pissa | pissa_niter_N (PiSSA by N-iteration fast SVD) | olora | eva (from the training data's "
                      "activations: sft, pt, gkd); pissa and olora rewrite the base while training, the saved adapter "
                      "is converted to a plain LoRA")
    use_rslora: bool = Field(False, description="rank-stabilised scaling alpha / sqrt(rank) (rsLoRA); the saved "
                             "adapter carries the same scaling as plain LoRA (lora_alpha x sqrt(rank))")

    @field_validator("init")
    @classmethod
    def _init(cls, value: str) -> str:
        if value not in LORA_INITS and not re.fullmatch(r"pissa_niter_[1-9]\d{0,3}", value):
            raise ValueError(f"unknown initialisation {value!r}; expected {' | '.join(LORA_INITS)} or pissa_niter_N")
        return value

    def rewrites_base(self) -> bool:
        """PiSSA / OLoRA: the base weights become a residual while training; the saved adapter is converted."""
        return self.init.startswith("pissa") or self.init == "olora"


class ProfileConfig(Strict):
    """A profiler window over training steps (torch.profiler.schedule semantics): skip `wait` steps, warm up
    for `warmup`, record `active`, `repeat` times (0: until training ends). Output: <out>/profile/."""
    wait: int = Field(1, ge=0, description="profile: steps to skip before each cycle")
    warmup: int = Field(1, ge=0, description="profile: steps traced but discarded (warm-up) per cycle")
    active: int = Field(3, ge=1, description="profile: steps recorded per cycle")
    repeat: int = Field(1, ge=0, description="profile: cycles (0: repeat until training ends)")
    record_shapes: bool = Field(False, description="profile: record operator input shapes")
    profile_memory: bool = Field(True, description="profile: track tensor allocations (peak memory in the window)")
    with_stack: bool = Field(False, description="profile: record Python stacks (large traces)")
    level: Literal["level_none", "level0", "level1", "level2"] = Field(
        "level0", description="profile (Ascend only): torch_npu ProfilerLevel")
    aic_metrics: Literal["none", "pipe_utilization", "arithmetic_utilization", "memory", "memory_l0", "memory_ub",
                         "resource_conflict_ratio", "l2_cache"] = Field(
        "none", description="profile (Ascend only): AI Core metrics (need level1 or level2)")
    l2_cache: bool = Field(False, description="profile (Ascend only): collect L2 cache data")

    def last_step(self) -> int:
        """The last training step (1-based) the window records; with repeat 0, the end of the first cycle."""
        return (self.wait + self.warmup + self.active) * max(self.repeat, 1)


class TrainBase(StepBase):
    dataset: Union[str, list[str]] = Field(..., description="jsonl/json/parquet path(s); 'path#N' samples N rows")
    eval_dataset: Optional[Union[str, list[str]]] = Field(None, description="held-out data for eval loss")
    method: Literal["lora", "qlora", "dora", "full"] = Field("lora", description="fine-tuning method")
    lora: LoraConfig = Field(default_factory=LoraConfig)
    epochs: float = Field(3, gt=0, le=100_000, description="passes over the data")
    max_steps: int = Field(-1, ge=-1, le=BIG, description="stop after this many optimizer steps (-1: use epochs)")
    learning_rate: float = Field(1e-4, gt=0, lt=1)
    batch_size: int = Field(4, ge=1, le=65536, description="per-device batch size")
    grad_accum: int = Field(1, ge=1, le=65536, description="gradient accumulation steps")
    max_length: int = Field(1024, ge=8, le=10**7, description="tokens per sample: longer prompts lose tokens from the "
                            "left (system prompt and reply kept)")
    max_row_chars: int = Field(1_000_000, ge=1, le=10**9, description="refuse a dataset row longer than this "
                               "(checked before tokenizing)")
    chat_template: Optional[str] = Field(None, description="a .jinja file used instead of the tokenizer's chat "
                                                           "template")
    warmup_ratio: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0, le=10)
    lr_scheduler: LrScheduler = Field("cosine", description="transformers scheduler name")
    gradient_checkpointing: bool = False
    seed: int = Field(42, ge=0, le=MAX_SEED)
    dtype: Dtype = Field("auto", description="compute dtype; auto = the platform's (bf16 > fp16 > fp32)")
    save_steps: int = Field(50, ge=1, le=BIG, description="checkpoint every N steps")
    logging_steps: int = Field(5, ge=1, le=BIG)
    resume: bool = Field(False, description="continue from the last checkpoint of an interrupted run")
    # distributed (docs/distributed.md): more than one process and the runner launches the step under torchrun
    devices: Optional[DevicesField] = Field(None, description="devices per node: a count (4) or ids ('0,1,2,3', one id "
                                                              "'3,'); more than one trains under torchrun")
    nnodes: int = Field(1, ge=1, description="machines taking part; run the same step on each with its node_rank")
    node_rank: int = Field(0, ge=0, description="this machine's index, 0..nnodes-1 (0 writes the artifacts)")
    master_addr: str = Field("127.0.0.1", description="address of node 0, reachable from every node")
    master_port: int = Field(29500, ge=1, le=65535, description="free TCP port on node 0 for the rendezvous")
    deepspeed: Optional[str] = Field(None, description="zero2 | zero3 | zero3_offload | path to a DeepSpeed json")
    fsdp: Optional[str] = Field(None, description="transformers FSDP options, e.g. 'full_shard auto_wrap'")
    profile: Optional[ProfileConfig] = Field(None, description="profiler window (docs/training.md); `profile: {}` "
                                             "takes the defaults")
    streaming: bool = Field(False, description="read the dataset lazily (jsonl; pt also .txt) through a shuffle "
                            "buffer, so data larger than memory trains with flat memory; needs max_steps (sft, pt)")
    shuffle_buffer: int = Field(10_000, ge=1, le=10**7, description="streaming: rows held and drawn from at random "
                                "(1: file order)")
    report_to: list[str] = Field(default_factory=list, description="experiment trackers through transformers' "
                                 "integrations: none (default) | wandb | swanlab | mlflow | trackio | tensorboard "
                                 "| ... (wandb and swanlab offline unless WANDB_MODE / SWANLAB_MODE say otherwise; "
                                 "TensorBoard events are written to <out>/tensorboard either way)")

    @field_validator("report_to", mode="before")
    @classmethod
    def _trackers(cls, value: Any) -> Any:
        """`wandb,mlflow`, `[wandb, mlflow]` and `none` / `[]`; names from transformers' INTEGRATION_TO_CALLBACK."""
        if value is None:
            return []
        if not isinstance(value, (str, list, tuple)):
            raise ValueError(f"expected tracker names, e.g. wandb or [wandb, mlflow]; one of {', '.join(REPORT_TO)}")
        items = [value] if isinstance(value, str) else list(value)
        names = [n.strip() for item in items for n in str(item).split(",") if n.strip()]
        if names == ["none"]:
            return []
        unknown = [n for n in names if n not in REPORT_TO]
        if unknown:
            shown = ", ".join(n if len(n) <= 40 else n[:37] + "..." for n in unknown[:3])
            raise ValueError(f"unknown tracker {shown}; expected none or names from "
                             f"{', '.join(REPORT_TO)}")
        return list(dict.fromkeys(names))

    @field_validator("profile", mode="before")
    @classmethod
    def _profile_switch(cls, value: Any) -> Any:
        return {} if value is True else (None if value is False else value)

    @field_validator("profile")
    @classmethod
    def _profile_within_run(cls, value: Optional[ProfileConfig], info: ValidationInfo) -> Optional[ProfileConfig]:
        # with max_steps known up front, a window past the end is bad input now (epoch-based runs: at train start)
        max_steps = info.data.get("max_steps", -1)
        if value is not None and max_steps > 0 and value.last_step() > max_steps:
            raise ValueError(f"the window ends at step {value.last_step()} but max_steps is {max_steps}; "
                             "shorten the window or train longer")
        return value

    @field_validator("max_steps")
    @classmethod
    def _max_steps(cls, value: int) -> int:
        if value == 0:
            raise ValueError("expected -1 (train for `epochs`) or a number of steps of at least 1")
        return value

    def kind(self) -> str:
        """The step kind this config belongs to (its key in STEP_TYPES)."""
        return next((k for k, v in STEP_TYPES.items() if v is type(self)), type(self).__name__)

    @model_validator(mode="after")
    def _lora_init(self) -> TrainBase:
        init = self.lora.init
        if init in ("default", "gaussian"):
            return self
        if self.method != "lora":
            raise ValueError(f"lora.init {init} needs method lora (got {self.method}); "
                             f"{'use lora.init default with ' + self.method if self.method != 'full' else 'drop it'}")
        if init == "eva" and self.kind() not in EVA_STEPS:
            raise ValueError(f"lora.init eva initialises from the training rows' activations, available in "
                             f"{', '.join(EVA_STEPS)}; the {self.kind()} step can use pissa, olora or default")
        if self.lora.rewrites_base():
            if self.kind() == "rm":
                raise ValueError(f"lora.init {init}: the rm step also trains a score head that PEFT's conversion to "
                                 "a plain LoRA would drop; use lora.init default or gaussian")
            if self.deepspeed or self.fsdp:
                raise ValueError(f"lora.init {init} with {'deepspeed' if self.deepspeed else 'fsdp'}: the adapter "
                                 "is converted to a plain LoRA when saved, which sharded saves skip; train it with "
                                 "plain DDP (devices: N) or use lora.init default")
        return self

    @model_validator(mode="after")
    def _streaming(self) -> TrainBase:
        if not self.streaming:
            return self
        kind = self.kind()
        if kind not in STREAMING_STEPS:
            raise ValueError(f"streaming: the {kind} step reads its dataset into memory; streaming is available in "
                             f"{', '.join(STREAMING_STEPS)}")
        if self.max_steps < 1:
            raise ValueError(f"streaming: the {kind} step needs max_steps (a stream has no length to count epochs by)")
        return self

    @field_validator("deepspeed")
    @classmethod
    def _deepspeed(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and value not in DEEPSPEED_PRESETS and not value.endswith(".json"):
            raise ValueError(f"expected one of {', '.join(DEEPSPEED_PRESETS)} or a path to a .json config")
        return value

    @field_validator("fsdp")
    @classmethod
    def _fsdp(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            bad = [w for w in value.split() if w not in FSDP_OPTIONS]
            if bad or not value.split():
                raise ValueError(f"unknown FSDP option {' '.join(bad) or value!r}; expected words from "
                                 f"{', '.join(FSDP_OPTIONS)}")
        return value

    @field_validator("node_rank")
    @classmethod
    def _node_rank(cls, value: int, info: ValidationInfo) -> int:
        nnodes = info.data.get("nnodes", 1)
        if value >= nnodes:
            raise ValueError(f"{value} is not below nnodes ({nnodes}); node ranks are 0..nnodes-1")
        return value

    @field_validator("fsdp")
    @classmethod
    def _one_sharding_engine(cls, value: Optional[str], info: ValidationInfo) -> Optional[str]:
        if value is not None and info.data.get("deepspeed"):
            raise ValueError("deepspeed and fsdp are both set; pick one sharding engine")
        return value


class TemplateSwitches(Strict):
    """`chat_template_kwargs` of the steps that render conversations with the chat template (sft and the preference
    steps): the switches every row of the dataset renders with; a row's own `chat_template_kwargs` win over them."""

    chat_template_kwargs: Optional[dict[str, Any]] = Field(
        None, description="chat-template switches for every row, as JSON: '{\"enable_thinking\": false}' (the ones "
        "the server takes: " + ", ".join(template_switches.SWITCHES) + "); a row's own chat_template_kwargs win")

    @field_validator("chat_template_kwargs", mode="before")
    @classmethod
    def _switches(cls, value: Any) -> Any:
        """A JSON object (the CLI flag, --set) or a mapping (recipe, API), checked against the allow-list."""
        if isinstance(value, list) and len(value) == 1:      # the CLI flag: one JSON text
            value = value[0]
        if isinstance(value, str):
            import json

            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError("expected a JSON object of template switches, e.g. "
                                 "'{\"enable_thinking\": false}'") from None
        if value is None:
            return None
        bad = template_switches.fault(value)
        if bad is not None:
            raise ValueError(f"{bad[0]}: {bad[1]}" if bad[0] else bad[1])
        return dict(value)


class SftStep(TemplateSwitches, TrainBase):
    """supervised fine-tuning: LoRA / QLoRA / DoRA / full"""

    packing: Optional[bool] = Field(None, description="padding-free packing of samples; default: the device's "
                                    "measured fastest mode (packing on every device so far)")
    group_by_length: Optional[bool] = Field(None, description="batch samples of similar length together; default: "
                                            "on when batches are padded")


class PtStep(TrainBase):
    """continued pre-training on raw text: .txt, jsonl `text`, or a directory of them (every token trains)"""

    dataset: Union[str, list[str]] = Field(..., description=".txt files (a document per paragraph), .jsonl files "
                                           "with a `text` column, or directories of them")
    eval_dataset: Optional[Union[str, list[str]]] = Field(None, description="held-out text for perplexity before and "
                                                          "after; default: the first `heldout` documents of dataset")
    block_size: int = Field(1024, ge=8, le=10**6, description="tokens per training row: documents joined with eos "
                            "and cut into blocks (one document per row, cut to this, where packing is not exact)")
    heldout: int = Field(32, ge=0, le=100_000, description="without eval_dataset: the first N documents are kept out "
                         "of training and scored before and after (0: no perplexity)")

    @model_validator(mode="after")
    def _block_size_is_length(self) -> PtStep:
        if "max_length" in self.model_fields_set and self.max_length != self.block_size:
            raise ValueError("pt cuts text into blocks of block_size tokens; set block_size, not max_length")
        self.max_length = self.block_size
        return self


# TRL DPOConfig.loss_type values (trl/trainer/dpo_config.py); several, comma-joined, are combined by TRL
DpoLoss = Literal["sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
                  "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm"]
DPO_LOSSES: tuple[str, ...] = get_args(DpoLoss)


class DpoStep(TemplateSwitches, TrainBase):
    """preference alignment with DPO"""

    beta: float = Field(0.1, gt=0, le=100, description="DPO temperature")
    loss_type: str = Field("sigmoid", description="TRL DPO loss type: " + " | ".join(DPO_LOSSES) + "; several "
                           "comma-joined (sigmoid,sft) are combined")
    ref_adapter: Optional[str] = Field(None, description="adapter to use as the reference model")
    learning_rate: float = Field(5e-5, gt=0, lt=1)
    epochs: float = Field(1, gt=0, le=100_000, description="passes over the data")

    @field_validator("loss_type")
    @classmethod
    def _loss_type(cls, value: str) -> str:
        types = [t.strip() for t in value.split(",") if t.strip()]
        unknown = [t for t in types if t not in DPO_LOSSES]
        if unknown or not types:
            raise ValueError(f"unknown {', '.join(repr(t) for t in unknown) or 'empty value'}; expected one of "
                             f"{', '.join(DPO_LOSSES)} (several comma-joined)")
        return ",".join(types)


class KtoStep(TemplateSwitches, TrainBase):
    """unpaired preference alignment with KTO (prompt + completion + good/bad label)"""

    beta: float = Field(0.1, gt=0, le=100, description="KTO temperature (deviation from the reference model)")
    loss_type: Literal["kto", "apo_zero_unpaired"] = Field("kto", description="TRL KTO loss type")
    desirable_weight: float = Field(1.0, gt=0, le=1000, description="weight of the losses of good (label true) rows")
    undesirable_weight: float = Field(1.0, gt=0, le=1000, description="weight of the losses of bad (label false) rows")
    ref_adapter: Optional[str] = Field(None, description="adapter to use as the reference model")
    learning_rate: float = Field(5e-5, gt=0, lt=1)
    epochs: float = Field(1, gt=0, le=100_000, description="passes over the data")


class OrpoStep(TemplateSwitches, TrainBase):
    """preference alignment with ORPO (SFT + odds ratio, no reference model)"""

    beta: float = Field(0.1, gt=0, le=100, description="ORPO lambda: weight of the odds-ratio term beside the SFT loss")
    learning_rate: float = Field(5e-5, gt=0, lt=1)
    epochs: float = Field(1, gt=0, le=100_000, description="passes over the data")


class SimpoStep(TemplateSwitches, TrainBase):
    """preference alignment with SimPO (length-normalised reward margin, no reference model)"""

    beta: float = Field(2.0, gt=0, le=100, description="SimPO beta: scale of the length-normalised reward")
    gamma: float = Field(0.5, ge=0, le=100, description="SimPO gamma: target reward margin")
    cpo_alpha: float = Field(0.0, ge=0, le=100, description="weight of an SFT (behaviour cloning) term on the chosen "
                             "replies; 0 = pure SimPO, >0 = CPO-SimPO")
    learning_rate: float = Field(5e-5, gt=0, lt=1)
    epochs: float = Field(1, gt=0, le=100_000, description="passes over the data")


class RmStep(TemplateSwitches, TrainBase):
    """reward model from preference pairs (a sequence-classification head that scores texts, for GRPO)"""

    center_rewards: Optional[float] = Field(None, ge=0, le=100, description="weight of a penalty that keeps rewards "
                                            "centred on zero (TRL center_rewards_coefficient, e.g. 0.01)")
    learning_rate: float = Field(1e-4, gt=0, lt=1)
    epochs: float = Field(1, gt=0, le=100_000, description="passes over the data")


# the GRPO losses swiftbox offers: TRL GRPOConfig.loss_type values, and gspo (TRL's grpo loss on sequence-level
# importance ratios); pipelines/grpo.py maps each onto TRL's settings and checks the installed TRL offers it
GrpoLoss = Literal["dapo", "grpo", "dr_grpo", "bnpo", "cispo", "sapo", "gspo", "luspo", "vespo"]
GRPO_LOSSES: tuple[str, ...] = get_args(GrpoLoss)


class GrpoStep(TrainBase):
    """GRPO with verifiable rewards (rule-based, your Python function, or a reward model)"""

    rewards: list[str] = Field(["exact"], description="reward functions: exact | contains | choice | length | "
                               "regex:PATTERN | format:<think> | path/to/rewards.py:function | model:DIR")
    reward_weights: Optional[list[float]] = Field(None, description="one weight per reward (default 1 each)")
    num_generations: int = Field(4, ge=2, le=1024, description="completions sampled per prompt (the group)")
    max_completion_length: int = Field(64, ge=1, le=10**6, description="tokens generated per completion")
    beta: float = Field(0.04, ge=0, le=100, description="KL penalty against the starting policy (0: none, no "
                        "reference copy)")
    temperature: float = Field(1.0, gt=0, le=10, description="sampling temperature of the rollouts")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling of the rollouts")
    loss_type: GrpoLoss = Field("dapo", description="the policy loss (TRL's): dapo | grpo | dr_grpo | bnpo | cispo | "
                                "sapo | gspo (sequence-level importance ratios) | luspo | vespo")
    scale_rewards: Optional[Literal["group", "batch", "none"]] = Field(
        None, description="advantages divided by the rewards' std over the group, the batch, or none; default: none "
                          "for dr_grpo (its paper), else group")
    epsilon: Optional[float] = Field(None, gt=0, le=10, description="clipping range of the importance ratio (lower "
                                     "side); default 0.2, gspo 3e-4 (its paper)")
    epsilon_high: Optional[float] = Field(None, gt=0, le=100, description="upper clipping range (DAPO's clip-higher: "
                                          "0.28; cispo: its ε_max, e.g. 5.0); default: epsilon, gspo 4e-4")
    mask_truncated_completions: bool = Field(False, description="leave completions cut at max_completion_length out "
                                             "of the loss (DAPO)")
    use_vllm: bool = Field(False, description="rollouts with TRL's vLLM colocate mode (CUDA with vllm installed)")
    learning_rate: float = Field(1e-5, gt=0, lt=1)
    epochs: float = Field(1, gt=0, le=100_000)

    @model_validator(mode="before")
    @classmethod
    def _weighted_map(cls, data: Any) -> Any:
        """`rewards: {exact: 1.0, "format:<think>": 0.2}` is the same as rewards + reward_weights."""
        if isinstance(data, dict) and isinstance(data.get("rewards"), dict):
            if data.get("reward_weights") is not None:
                raise ValueError("rewards is a {spec: weight} map; drop reward_weights")
            data = dict(data)
            mapping = data.pop("rewards")
            data["rewards"], data["reward_weights"] = list(mapping), list(mapping.values())
        return data

    @field_validator("rewards")
    @classmethod
    def _reward_specs(cls, value: list[str]) -> list[str]:
        from swiftbox.reward_spec import parse_spec

        if not value:
            raise ValueError("name at least one reward, e.g. [exact]")
        for spec in value:
            parse_spec(spec)          # syntax only; files and models are checked by the pipeline's check
        return value

    @model_validator(mode="after")
    def _groups_fit(self) -> GrpoStep:
        weights = self.reward_weights
        if weights is not None:
            if len(weights) != len(self.rewards):
                raise ValueError(f"reward_weights has {len(weights)} value(s) for {len(self.rewards)} reward(s)")
            if any(abs(w) > 1e6 for w in weights) or not any(weights):
                raise ValueError("reward_weights: expected finite weights within ±1e6, not all zero")
        if (self.batch_size * self.grad_accum) % self.num_generations:
            raise ValueError(f"batch_size × grad_accum ({self.batch_size} × {self.grad_accum}) must be a multiple "
                             f"of num_generations ({self.num_generations}): each batch holds whole groups")
        return self


class GkdStep(TrainBase):
    """knowledge distillation from a teacher model (GKD: on-policy, generalized JSD)"""

    teacher: str = Field(..., min_length=1, description="the teacher: toy, a ModelScope id, hf:ORG/NAME, a local dir "
                         "or an artifact dir (its adapters merged); it must share the student's tokenizer")
    lmbda: float = Field(0.5, ge=0, le=1, description="share of steps trained on the student's own sampled answers "
                         "(on-policy); the others train on the dataset's replies")
    beta: float = Field(0.5, ge=0, le=1, description="generalized JSD between teacher and student: 0 = forward KL "
                        "(teacher || student), 1 = reverse KL, 0.5 = JSD")
    temperature: float = Field(0.9, gt=0, le=10, description="sampling temperature of the generated answers")
    seq_kd: bool = Field(False, description="sequence-level KD: off-policy steps train on the teacher's own sampled "
                         "answers instead of the dataset's replies")
    max_new_tokens: int = Field(128, ge=1, le=10**6, description="tokens sampled per answer (the student's on-policy, "
                                "the teacher's with seq_kd)")
    probe_rows: int = Field(16, ge=0, le=10_000, description="rows (eval_dataset's, else the dataset's first) on "
                            "which KL(teacher || student) is measured before and after (0: not measured)")
    epochs: float = Field(1, gt=0, le=100_000, description="passes over the data")


class EvalStep(StepBase):
    """accuracy on your own question/answer file, perplexity, or standard benchmarks (MMLU, GSM8K, ARC, HellaSwag,
    IFEval) through lm-evaluation-harness on local files"""

    dataset: Optional[str] = Field(None, description="jsonl with questions and reference answers")
    match: Literal["exact", "contains"] = Field("exact", description="how a generated answer is compared")
    perplexity: Optional[str] = Field(None, description="text/jsonl file to measure perplexity on")
    max_new_tokens: int = Field(16, ge=1, le=100_000)
    limit: Optional[int] = Field(None, ge=1, le=BIG, description="evaluate only the first N rows (benchmarks: per "
                                 "task)")
    batch_size: int = Field(16, ge=1, le=65536)
    dtype: Dtype = "auto"
    benchmark: Optional[list[str]] = Field(None, description="standard benchmarks, comma-separated: mmlu, gsm8k, "
                                           "arc (arc_challenge), arc_easy, hellaswag, ifeval ([eval] extra)")
    compare: Optional[list[str]] = Field(None, description="benchmarks: more models scored the same way, one table "
                                         "column each (on the command line: more positional models)")
    data_dir: Optional[str] = Field(None, description="benchmarks: folder of Hugging Face datasets in their own "
                                    "layout (DIR/openai/gsm8k/main/test-*.parquet); default: the shipped slices")
    benchmark_data: Optional[dict[str, str]] = Field(None, description="benchmarks: name=path for one benchmark's "
                                                     "dataset folder or scored-split file")
    shots: Optional[int] = Field(None, ge=0, le=64, description="benchmarks: few-shot examples (default: each "
                                 "task's own)")
    chat_template: bool = Field(False, description="benchmarks: format prompts with the model's chat template")
    max_gen_tokens: Optional[int] = Field(None, ge=1, le=100_000, description="benchmarks: cap on generated tokens "
                                          "per answer (default: each task's own, e.g. gsm8k 256, ifeval 1280)")
    url: Optional[str] = Field(None, description="benchmarks: score a running OpenAI-compatible server instead of "
                               "loading the model")
    api: Literal["chat", "completions"] = Field("chat", description="benchmarks with --url: chat completions "
                                                "(generation tasks) or completions (also log-likelihood tasks)")
    api_key: Optional[str] = Field(None, description="benchmarks with --url: the server's API key; prefer "
                                   "SWIFTBOX_API_KEY or --api-key-file (a key on the command line shows in ps)")
    api_key_file: Optional[str] = Field(None, description="benchmarks with --url: file whose first line is the "
                                        "server's API key")
    served_model: Optional[str] = Field(None, description="benchmarks with --url: the model name to ask for "
                                        "(default: the server's first)")

    @field_validator("benchmark", mode="before")
    @classmethod
    def _benchmarks(cls, value: Any) -> Any:
        """`--benchmark gsm8k,mmlu` and `[gsm8k, mmlu]` mean the same."""
        if value is None:
            return value
        if not isinstance(value, (str, list, tuple)):
            raise ValueError("expected benchmark names, e.g. gsm8k,mmlu or [gsm8k, mmlu]")
        items = [value] if isinstance(value, str) else list(value)
        names = [n.strip() for item in items for n in str(item).split(",") if n.strip()]
        if not names:
            raise ValueError("name at least one benchmark, e.g. gsm8k,mmlu")
        from swiftbox.benchmarks.catalog import resolve
        from swiftbox.errors import UserError

        try:
            return [b.name for b in resolve(names)]
        except UserError as exc:
            raise ValueError(str(exc).removeprefix("benchmark: ")) from None

    @field_validator("benchmark_data", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        return _parse_pairs(value)


class DownloadStep(StepBase):
    """fetch a model (ModelScope, hf:ORG/NAME, local dir, or toy)"""

    source: Literal["auto", "modelscope", "hf", "local"] = Field("auto", description="hub; auto = ModelScope unless "
                                                                                     "hf: prefix")
    revision: Optional[str] = Field(None, description="branch, tag or commit; default master (ModelScope) / main (HF)")
    include: Optional[list[str]] = Field(None, description="glob patterns to fetch (default: everything but pickles)")
    exclude: Optional[list[str]] = Field(None, description="glob patterns to skip")
    allow_pickle: bool = Field(False, description="also fetch *.bin / *.pt pickle weights (they can run code when "
                                                  "loaded)")
    cache_dir: Optional[str] = Field(None, description="hub cache directory; default the hub's own (MODELSCOPE_CACHE / "
                                                       "HF_HUB_CACHE)")
    link: Literal["auto", "hardlink", "symlink", "copy"] = Field(
        "auto", description="how the output holds the files: auto = copy small files, hard-link weights "
                            "(symlink across filesystems) to the hub cache; copy duplicates everything")


class MergeStep(StepBase):
    """merge adapters into their base model"""

    adapters: Optional[list[str]] = Field(None, description="adapter dirs to merge, in order; default: the input")
    base: Optional[str] = Field(None, description="base model; default: from the adapter's manifest")
    dtype: Dtype = Field("auto", description="dtype the merged weights are saved in; auto = the base model's own. "
                                             "The merge is computed and checked in float32 whatever this says")
    max_shard_size: str = Field("2GB", description="largest safetensors shard, e.g. 500MB, 5GB")
    probe: Optional[str] = Field(None, description="prompts to verify the merge on (.txt/.jsonl); default: built-in")
    tolerance: Optional[float] = Field(None, gt=0, le=1e6,
                                       description="fail when max |Δlogit| / max(1, max |logit|) exceeds "
                                       "this; default 1e-4 (the merge is checked in float32)")

    @field_validator("max_shard_size")
    @classmethod
    def _shard_size(cls, value: Any) -> Any:
        return check_size(value)

    @model_validator(mode="after")
    def _input_from_adapters(self) -> MergeStep:
        # `--adapters A B` alone is a complete request: the first adapter is the step's input
        if self.model is None and self.adapters:
            self.model = self.adapters[0]
        return self


class QuantTolerance(Strict):
    """Bounds the quantize step fails past; unset fields keep the documented defaults (docs/export.md)."""

    min_cosine: Optional[float] = Field(None, ge=0, le=1, description="mean logit cosine vs the source on the probe")
    min_argmax_agreement: Optional[float] = Field(None, ge=0, le=1, description="top-1 agreement with the source")
    max_perplexity_ratio: Optional[float] = Field(None, gt=0, description="held-out perplexity after / before")
    max_accuracy_drop: Optional[float] = Field(None, ge=0, le=1, description="eval accuracy before - after")
    max_size_ratio: Optional[float] = Field(None, gt=0, description="weight bytes of the export / the source")
    min_greedy_agreement: Optional[float] = Field(None, ge=0, le=1, description="gguf: probe prompts whose greedy "
                                                  "continuation in llama.cpp equals the source's")


# GGUF types (llama.cpp's names, lower case) and the bits each is gated as: the gguf record's (quant_methods.py)
GGUF_TYPES = quant_methods.GGUF.types


class QuantizeStep(StepBase):
    """export: GPTQ / AWQ 4-bit, bitsandbytes NF4 / int8, FP8 (GPU), each quality-gated"""

    # the choices, their bits and help are the records' in swiftbox/quant_methods.py (checked by _known_method)
    method: str = Field(quant_methods.DEFAULT, description=" | ".join(m.help for m in quant_methods.METHODS.values()))
    bits: Optional[int] = Field(None, description="4 or 8; default 4 (fp8: 8); awq is 4-bit only; gguf: see --type")
    type: Optional[Literal["f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m"]] = Field(
        None, description="gguf type: f16 | bf16 | q8_0 (default) | q6_k | q5_k_m | q4_k_m")
    adapter_only: bool = Field(False, description="gguf: write a LoRA adapter as a GGUF LoRA (llama-server --lora, "
                               "Ollama ADAPTER) instead of merging it")
    group_size: int = Field(128, ge=-1, le=65536, description="GPTQ/AWQ group size (-1 = per-channel); lowered to one "
                            "that divides "
                            "every layer's input width when needed")
    desc_act: bool = Field(False, description="GPTQ act-order: quantize columns by decreasing activation size")
    sym: bool = Field(True, description="symmetric quantization (AWQ: false = with zero points)")
    damp_percent: float = Field(0.05, gt=0, lt=1, description="GPTQ Hessian dampening")
    dataset: Optional[str] = Field(None, description="calibration data (.jsonl/.json/.txt); default: the lineage's "
                                   "training data, else bundled text")
    eval_dataset: Optional[str] = Field(None, description="questions with reference answers: accuracy before and "
                                        "after is measured and gated (max_accuracy_drop)")
    samples: int = Field(128, ge=1, le=BIG, description="calibration samples")
    max_length: int = Field(512, ge=8, le=10**7, description="truncate calibration samples to this many tokens")
    batch_size: int = Field(8, ge=1, le=65536, description="calibration batch size")
    dtype: Dtype = Field("auto", description="dtype of the unquantized parts (embeddings, norms); GPTQ/AWQ kernels "
                         "run in 16-bit, so auto/float32 mean bfloat16 where supported, else float16")
    max_shard_size: str = Field("2GB", description="largest safetensors shard")
    tolerance: QuantTolerance = Field(default_factory=QuantTolerance)

    @field_validator("method", mode="before")
    @classmethod
    def _known_method(cls, value: Any) -> Any:
        error = quant_methods.choice_error(value)   # read at validation time: a registered record is a choice
        if error is not None:
            raise PydanticCustomError("literal_error", error)
        return value

    @field_validator("bits")
    @classmethod
    def _bits_for_method(cls, value: Optional[int], info: ValidationInfo) -> Optional[int]:
        method = info.data.get("method", quant_methods.DEFAULT)
        allowed = quant_methods.METHODS[method].bits if method in quant_methods.METHODS else (4, 8)
        if value is not None and value not in allowed:
            raise ValueError(f"{value} is not available with method {method}; "
                             f"expected {' or '.join(map(str, allowed))}")
        return value

    @field_validator("group_size")
    @classmethod
    def _group_size(cls, value: Any) -> Any:
        if value == 0:
            raise ValueError("expected -1 (per-channel) or a positive group size such as 32, 64 or 128")
        return value

    @field_validator("max_shard_size")
    @classmethod
    def _shard_size(cls, value: Any) -> Any:
        return check_size(value)

    @model_validator(mode="after")
    def _default_bits(self) -> QuantizeStep:
        method = quant_methods.METHODS[self.method]
        if method.types:     # gguf: the type names the bits
            types = method.types
            by_bits = {bits: name for name, bits in reversed(list(types.items()))}
            chosen = self.type or (by_bits[self.bits] if self.bits else ("f16" if self.adapter_only else "q8_0"))
            if self.type is not None and self.bits is not None and self.bits != types[chosen]:
                raise ValueError(f"bits {self.bits} contradicts {self.method} type {chosen} ({types[chosen]}-bit); "
                                 "pass only --type")
            self.type, self.bits = chosen, types[chosen]  # type: ignore[assignment]
            return self
        if self.type is not None or self.adapter_only:
            typed = " or ".join(m.name for m in quant_methods.METHODS.values() if m.types)
            raise ValueError(f"{'type' if self.type is not None else 'adapter_only'} applies to method {typed} only "
                             f"(got method {self.method})")
        if self.bits is None:
            self.bits = method.bits[0]
        return self


class VerifyStep(StepBase):
    """pre-deploy gate: files, engine fit, parity chain up to the served model"""

    engine: Literal["builtin", "vllm"] = Field("builtin", description="the engine the artifact will be deployed on")
    against: Optional[str] = Field(None, description="base model or adapter to start the parity chain from")
    serve: bool = Field(True, description="ask the model through the engine over HTTP (the last parity link)")
    probe: Optional[str] = Field(None, description="prompts (.txt one a line, or .jsonl); default: built-in")
    dtype: Dtype = "auto"


class ServeStep(StepBase):
    """OpenAI-compatible server (built-in engine or vLLM)"""

    engine: Literal["auto", "builtin", "vllm"] = Field("auto", description="auto picks vLLM where it runs")
    host: str = Field("127.0.0.1", description="bind address; 0.0.0.0 exposes the server (needs an API key)")
    port: int = Field(8000, ge=0, le=65535)
    api_key: Optional[str] = Field(None, description="required on every route but /health; prefer SWIFTBOX_API_KEY "
                                   "or --api-key-file (a key on the command line shows in ps)")
    api_key_file: Optional[str] = Field(None, description="file whose first line is the API key")
    insecure_no_auth: bool = Field(False, description="serve without an API key where a key would be required; on a "
                                   "non-loopback host it also needs --expose-without-auth")
    expose_without_auth: bool = Field(False, description="with --insecure-no-auth: really serve a non-loopback host "
                                      "with no API key (anyone on the network can use the model and its adapters)")
    adapters: Optional[dict[str, str]] = Field(None, description="name=path LoRA adapters served by model name")
    runtime_adapters: Optional[bool] = Field(None, description="let clients load/unload LoRA adapters at run time "
                                             "(/v1/load_lora_adapter); default: on for the built-in engine, on for "
                                             "vLLM when adapters are given")
    adapter_root: Optional[list[str]] = Field(None, description="directories runtime adapters may be loaded from "
                                              "(repeatable; default: runs)")
    max_lora_rank: Optional[int] = Field(None, ge=1, le=512, description="the largest LoRA rank a runtime adapter may "
                                         "have; vLLM: the largest it can load (default: 64 with runtime adapters, "
                                         "else the adapters' own); built-in: default 512")
    max_loaded_adapters: int = Field(16, ge=1, le=1024, description="runtime adapters loaded at once; past it a load "
                                     "gets 429 until one is unloaded")
    max_adapter_memory_mb: int = Field(4096, ge=1, le=10**7, description="memory runtime adapters may take together "
                                       "(their LoRA matrices at 4 bytes a value); past it a load is refused")
    max_loras: Optional[int] = Field(None, ge=1, le=1024, description="vLLM: adapters in one batch (default: the "
                                     "adapters given, at least 4 with runtime adapters)")
    metrics_public: bool = Field(False, description="serve /metrics without the API key (for a Prometheus scraper)")
    trust_request_chat_template: bool = Field(False, description="let clients send their own chat template "
                                              "(chat_template, chat_template_kwargs.chat_template); off: 400")
    served_model_name: Optional[str] = None
    max_model_len: Optional[int] = Field(None, ge=16, le=10**7)
    max_batch_size: int = Field(8, ge=1, le=4096, description="built-in engine: concurrent sequences")
    max_queue: int = Field(128, ge=1, le=100_000, description="built-in engine: sequences waiting for a slot; "
                           "past it requests get 429 with Retry-After")
    prefill_chunk: int = Field(256, ge=1, le=1_000_000, description="built-in engine: prompt tokens prefilled per "
                               "step between decode steps (chunked prefill; smaller = smoother streams under long "
                               "prompts)")
    devices: Optional[DevicesField] = Field(None, description="a count (2) or ids ('0,1', one id '3,'); vLLM "
                                                              "tensor-parallel size = the number of devices")
    dtype: Dtype = "auto"
    quantization: Optional[Literal["bnb-4bit", "bnb-8bit"]] = Field(None, description="load-time quantization")
    smoke: bool = Field(False, description="start, ask one question with the openai client, check, stop")
    smoke_prompt: str = Field("Is 7 even?", min_length=1, max_length=10_000,
                              description="smoke: the question the openai client asks")
    startup_timeout: int = Field(900, ge=1, le=86400,
                                 description="vLLM engine: seconds to wait for the child to be healthy")

    @model_validator(mode="before")
    @classmethod
    def _no_backend(cls, data: Any) -> Any:
        if isinstance(data, dict) and "backend" in data:    # an old undocumented spelling: refused, not guessed
            raise ValueError("backend: not a serve setting; the engine is chosen with engine: auto|builtin|vllm "
                             "(--engine)")
        return data

    @field_validator("adapters", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        return _parse_pairs(value)

    @field_validator("host")
    @classmethod
    def _host(cls, value: Any) -> Any:
        if not value.strip() or value != value.strip():
            raise ValueError("expected an address such as 127.0.0.1 (local only) or 0.0.0.0 (every interface)")
        return value


class ChatStep(StepBase):
    """chat in the terminal with a model or a running server"""

    url: Optional[str] = Field(None, description="chat with a running server instead of loading the model")
    prompt: Optional[str] = Field(None, description="ask one question and exit")
    system: Optional[str] = None
    max_tokens: int = Field(256, ge=1, le=1_000_000)
    temperature: Optional[float] = Field(None, ge=0, le=2, description="default: the model's generation_config "
                                         "(its sampling settings), greedy (0) where it has none")
    api_key: Optional[str] = None
    adapters: Optional[dict[str, str]] = None
    dtype: Dtype = "auto"

    @field_validator("adapters", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        return _parse_pairs(value)


# transformers' reporting integrations (integrations.INTEGRATION_TO_CALLBACK;
# tests/unit/test_train_tracking.py checks them)
REPORT_TO = ("tensorboard", "wandb", "swanlab", "mlflow", "trackio", "comet_ml", "neptune", "clearml", "dvclive",
             "azure_ml", "dagshub", "codecarbon", "flyte", "kubeflow")
STREAMING_STEPS = ("sft", "pt")      # the training steps that read their dataset lazily (streaming: true)
DEEPSPEED_PRESETS = ("zero2", "zero3", "zero3_offload")
# transformers' FSDPOption values
FSDP_OPTIONS = ("full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2", "offload", "auto_wrap")


def check_size(value: str) -> str:
    """A shard size like 500MB / 2GB / 1.5GiB (what transformers' save_pretrained understands)."""
    if not isinstance(value, str) or not SIZE_RE.match(value):
        raise ValueError(f"expected a size such as 500MB or 2GB, got {value!r}")
    return value.strip()


def _parse_pairs(value: Any) -> Any:
    """Accept {'a': 'p'} or ['a=p', ...] (the CLI form) for name=path maps."""
    if isinstance(value, (list, tuple)):
        out = {}
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise ValueError(f"expected name=path, got {item!r}")
            name, path = item.split("=", 1)
            out[name.strip()] = path.strip()
        return out
    return value


# The step kinds, in the order the CLI and docs list them. A new pipeline adds its schema here (its docstring
# is the command's help line) and swiftbox/pipelines/<kind>.py; the runner, worker, CLI and API find it.
STEP_TYPES: dict[str, type[StepBase]] = {
    "download": DownloadStep,
    "sft": SftStep,
    "pt": PtStep,
    "dpo": DpoStep,
    "kto": KtoStep,
    "orpo": OrpoStep,
    "simpo": SimpoStep,
    "rm": RmStep,
    "grpo": GrpoStep,
    "gkd": GkdStep,
    "eval": EvalStep,
    "merge": MergeStep,
    "quantize": QuantizeStep,
    "verify": VerifyStep,
    "serve": ServeStep,
    "chat": ChatStep,
}

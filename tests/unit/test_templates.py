"""The template matrix (issue 12): the real chat templates of every preset family (tests/fixtures/templates,
provenance in its README) on the toy's tokenizer. For multi-turn with and without system, tool calls and
reasoning: the labelled tokens decode to exactly the assistant replies plus the end-of-turn marker, the DPO
completion is the reply and its prompt the generation prompt, and eval scores a choice on the whole reply.
Templates that cannot render a conversation, or where a reply cannot be located, are refused (exit 2)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pytest

from swiftbox import data
from swiftbox.errors import UserError
from tests.support.templates import TEMPLATES, TURNS


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
    "HuggingFaceTB-SmolLM3-3B": Renders("<|im_end|>"),
    "HuggingFaceTB-SmolLM2-135M-Instruct": Renders("<|im_end|>"),
    "LiquidAI-LFM2-1.2B": Renders(
        "<|im_end|>", tool_call="<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|><|im_end|>"),
    "ibm-granite-granite-4.0-h-tiny": Renders("<|end_of_text|>", tool_call=HERMES + "<|end_of_text|>"),
    "microsoft-phi-4": Renders("<|im_end|>"),
    "allenai-Olmo-3-7B-Instruct": Renders(
        "<|im_end|>", tool_call='<function_calls>get_weather(city="Paris")</function_calls><|im_end|>'),
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
QWEN3_LAST = FAMILIES["Qwen-Qwen3-0.6B"].last_prefix


@pytest.fixture(scope="module")
def tok(toy_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(toy_dir)


def use(tok, name: str):
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    return tok


def replies(tok, messages, tools=None) -> list[str]:
    enc = data.encode(tok, messages, tools)
    labelled = tok.decode([t for t in enc.labels if t != -100])
    pieces = [tok.decode(enc.input_ids[s:e]) for s, e in enc.replies]
    assert labelled == "".join(pieces)        # nothing labelled outside the replies
    return pieces


def expected(name: str, texts: list[str]) -> list[str]:
    """The labels of replies `texts`, the last one last in the conversation."""
    r = FAMILIES[name]
    earlier = r.eot if r.earlier_eot is None else r.earlier_eot
    out = [r.prefix + t + earlier for t in texts[:-1]]
    return out + [r.prefix + r.last_prefix + texts[-1] + r.eot]


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
}


def test_every_preset_family_has_a_fixture():
    from swiftbox.modeling.registry import PRESETS

    missing = sorted({p.family for p in PRESETS} - set(FIXTURE_OF))
    assert not missing, f"preset families without a real-template fixture: {missing}"
    for family, name in FIXTURE_OF.items():
        assert name in FAMILIES and (TEMPLATES / f"{name}.jinja").is_file(), family
    readme = (TEMPLATES / "README.md").read_text(encoding="utf-8")
    assert all(f"{name}.jinja" in readme for name in NAMES)     # every fixture has its provenance row


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("system", [False, True])
def test_multi_turn_labels_are_exactly_the_replies(tok, name, system):
    use(tok, name)
    messages = ([SYSTEM] if system else []) + TURNS
    if system and not FAMILIES[name].system:
        with pytest.raises(UserError, match="System role not supported"):
            data.encode(tok, messages)
        return
    assert replies(tok, messages) == expected(name, ["Hello.", "Bye."])


@pytest.mark.parametrize("name", NAMES)
def test_reasoning_is_trained_as_the_template_renders_it(tok, name):
    use(tok, name)
    messages = [dict(m, reasoning_content="Think " + m["content"]) if m["role"] == "assistant" else m for m in TURNS]
    got = replies(tok, messages)
    if FAMILIES[name].reasoning:    # earlier turns lose their reasoning where the template drops it
        assert got == list(FAMILIES[name].reasoning)
    else:                           # the other templates ignore reasoning_content
        assert got == expected(name, ["Hello.", "Bye."])


@pytest.mark.parametrize("name", NAMES)
def test_tool_calls_are_labelled_as_the_model_must_emit_them(tok, name):
    use(tok, name)
    call = FAMILIES[name].tool_call
    prompt = data.render(tok, TOOL_TURNS[:1], TOOLS, generation_prompt=True)
    if call is None:    # no tool calls in the template: swiftbox's default tool format (data/dialect.py)
        assert replies(tok, TOOL_TURNS, TOOLS) == expected(name, [HERMES, "It is 21 degrees."])
        assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in prompt
        assert "<tool_response>\n{\"temp\": 21}\n</tool_response>" in data.render(tok, TOOL_TURNS, TOOLS)
        return
    assert replies(tok, TOOL_TURNS, TOOLS) == [call] + expected(name, ["It is 21 degrees."])
    assert ("get_weather" in prompt) == FAMILIES[name].lists_tools          # the tool schemas reach the template


@pytest.mark.parametrize("name", NAMES)
def test_dpo_split_and_eval_choice_use_the_same_spans(tok, name):
    use(tok, name)
    prompt = TURNS[:3]
    row = {"prompt": prompt, "chosen": [{"role": "assistant", "content": "Bye."}],
           "rejected": [{"role": "assistant", "content": "No way."}]}
    (pair,), counts = data.dpo_strings([row], tok, 4096)      # long default system prompts (Mistral, SmolLM3) fit
    assert counts.dropped == counts.truncated == 0
    assert pair["prompt"] == tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    assert [pair["chosen"], pair["rejected"]] == [expected(name, ["Bye."])[0], expected(name, ["No way."])[0]]
    ids = data.preference_ids(tok, pair, ("chosen",))      # what the preference trainers train on: nothing appended
    assert tok.decode(ids["prompt_ids"] + ids["chosen_ids"]) == pair["prompt"] + pair["chosen"]
    enc = data.encode(tok, prompt + [{"role": "assistant", "content": "No way."}], only_last=True)
    assert tok.decode([t for t in enc.labels if t != -100]) == expected(name, ["No way."])[0]


@pytest.mark.parametrize("name", NAMES)
def test_tool_call_dpo_completion_ends_with_the_call(tok, name):
    """A chosen reply that is a tool call ends where the template's call ends (its closing markup included), and is
    what SFT labels for the same turn."""
    use(tok, name)
    row = {"prompt": TOOL_TURNS[:1], "chosen": [TOOL_TURNS[1]], "rejected": [{"role": "assistant", "content": "No."}],
           "tools": TOOLS}
    (pair,), _ = data.dpo_strings([row], tok, 4096)
    call = FAMILIES[name].tool_call or expected(name, [HERMES])[0]
    assert pair["chosen"].endswith(call[-12:]) and "Paris" in pair["chosen"]
    enc = data.encode(tok, TOOL_TURNS[:2], TOOLS, only_last=True)
    assert tok.decode([t for t in enc.labels if t != -100]) == pair["chosen"]


def test_qwen3_partial_renders_are_not_prefixes_yet_labels_are_exact(tok):
    use(tok, "Qwen-Qwen3-0.6B")
    partial = tok.apply_chat_template(TURNS[:2], tokenize=False)
    assert not tok.apply_chat_template(TURNS, tokenize=False).startswith(partial)
    assert replies(tok, TURNS) == ["Hello.<|im_end|>", QWEN3_LAST + "Bye.<|im_end|>"]


ECHO = ("{% for m in messages %}{% if m.role == 'user' %}<u>{{ m.content }}"
        "{% if not loop.first %} (you said: {{ messages[loop.index0 - 1].content }}){% endif %}</u>"
        "{% else %}<a>{{ m.content }}</a>{% endif %}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}")
DROPS_HISTORY = ("{% for m in messages %}{% if m.role != 'assistant' or loop.last %}<{{ m.role }}>{{ m.content }}"
                 "</s>{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


@pytest.mark.parametrize("template,why", [(ECHO, "would fall inside"), (DROPS_HISTORY, "does not render")])
def test_templates_that_rewrite_history_are_refused(tok, template, why):
    tok.chat_template = template
    with pytest.raises(UserError, match=why) as err:
        data.encode(tok, TURNS)
    assert "chat_template" in str(err.value) and "\n" not in str(err.value)

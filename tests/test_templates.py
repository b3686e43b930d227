"""The template matrix (issue 12): the real chat templates of every preset family (tests/fixtures/templates,
provenance in its README) on the toy's tokenizer. For multi-turn with and without system, tool calls and
reasoning: the labelled tokens decode to exactly the assistant replies plus the end-of-turn marker, the DPO
completion is the reply and its prompt the generation prompt, and eval scores a choice on the whole reply.
Templates that cannot render a conversation, or where a reply cannot be located, are refused (exit 2)."""
from __future__ import annotations

from pathlib import Path

import pytest

from swiftbox import data
from swiftbox.errors import UserError

TEMPLATES = Path(__file__).parent / "fixtures" / "templates"
# file stem -> end-of-turn marker as rendered with the toy tokenizer ('' = the template writes none)
EOT = {
    "Qwen-Qwen2.5-7B-Instruct": "<|im_end|>", "Qwen-Qwen3-0.6B": "<|im_end|>",
    "meta-llama-Llama-3.1-8B-Instruct": "<|eot_id|>", "meta-llama-Llama-3.2-3B-Instruct": "<|eot_id|>",
    "mistralai-Mistral-Nemo-Instruct-2407": "<|im_end|>",          # eos_token: the toy's
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "<｜end▁of▁sentence｜>", "THUDM-glm-4-9b-chat": "",
    "internlm-internlm2_5-7b-chat": "<|im_end|>", "baichuan-inc-Baichuan2-7B-Chat": "",
    "google-gemma-2-2b-it": "<end_of_turn>", "microsoft-Phi-3.5-mini-instruct": "<|end|>",
}
PREFIX = {"THUDM-glm-4-9b-chat": "\n"}                        # GLM-4: the reply starts on a new line
QWEN3_LAST = "<think>\n\n</think>\n\n"                          # Qwen3 writes an empty think block on the last turn
NO_SYSTEM = {"google-gemma-2-2b-it"}                            # raises 'System role not supported'
TOOL_CALL_TEXT = {
    "Qwen-Qwen2.5-7B-Instruct": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "Qwen-Qwen3-0.6B": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "meta-llama-Llama-3.1-8B-Instruct": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "meta-llama-Llama-3.2-3B-Instruct": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "mistralai-Mistral-Nemo-Instruct-2407":
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call12345"}]',
}
SYSTEM = {"role": "system", "content": "Be brief."}
TURNS = [{"role": "user", "content": "Hi there."}, {"role": "assistant", "content": "Hello."},
         {"role": "user", "content": "Bye now."}, {"role": "assistant", "content": "Bye."}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
TOOL_TURNS = [{"role": "user", "content": "Weather in Paris?"},
              {"role": "assistant", "content": None, "tool_calls": [{"id": "call12345", "type": "function",
                                                                      "function": {"name": "get_weather",
                                                                                   "arguments": {"city": "Paris"}}}]},
              {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": '{"temp": 21}'},
              {"role": "assistant", "content": "It is 21 degrees."}]
NAMES = sorted(EOT)


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
    out = [PREFIX.get(name, "") + t + EOT[name] for t in texts]
    if name == "Qwen-Qwen3-0.6B":
        out[-1] = QWEN3_LAST + out[-1]
    return out


def test_every_preset_family_has_a_fixture():
    from swiftbox.modeling.registry import PRESETS

    families = {p.family for p in PRESETS}
    covered = {"Qwen2.5": "Qwen-Qwen2.5", "Qwen3": "Qwen-Qwen3", "Llama-3": "meta-llama", "GLM-4": "THUDM-glm-4",
               "InternLM": "internlm", "Baichuan": "baichuan", "DeepSeek-R1-Distill": "deepseek-ai-DeepSeek-R1"}
    for family in families:
        if family in covered:
            assert any(n.startswith(covered[family]) for n in NAMES), family
    others = {"google-gemma-2-2b-it", "microsoft-Phi-3.5-mini-instruct", "mistralai-Mistral-Nemo-Instruct-2407"}
    assert others <= set(NAMES)
    assert (TEMPLATES / "README.md").read_text().count("|") > len(NAMES)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("system", [False, True])
def test_multi_turn_labels_are_exactly_the_replies(tok, name, system):
    use(tok, name)
    messages = ([SYSTEM] if system else []) + TURNS
    if system and name in NO_SYSTEM:
        with pytest.raises(UserError, match="System role not supported"):
            data.encode(tok, messages)
        return
    assert replies(tok, messages) == expected(name, ["Hello.", "Bye."])


@pytest.mark.parametrize("name", NAMES)
def test_reasoning_is_trained_as_the_template_renders_it(tok, name):
    use(tok, name)
    messages = [dict(m, reasoning_content="Think " + m["content"]) if m["role"] == "assistant" else m for m in TURNS]
    got = replies(tok, messages)
    if name == "Qwen-Qwen3-0.6B":   # earlier turns lose their reasoning; the last keeps it
        assert got == ["Hello.<|im_end|>", "<think>\nThink Bye.\n</think>\n\nBye.<|im_end|>"]
    else:                           # the other templates ignore reasoning_content
        assert got == expected(name, ["Hello.", "Bye."])


@pytest.mark.parametrize("name", NAMES)
def test_tool_calls_are_labelled_as_the_model_must_emit_them(tok, name):
    use(tok, name)
    if name not in TOOL_CALL_TEXT:    # templates that cannot render a tool call: refused, never mislabelled
        with pytest.raises(UserError):
            data.encode(tok, TOOL_TURNS, TOOLS)
        return
    assert replies(tok, TOOL_TURNS, TOOLS) == [TOOL_CALL_TEXT[name] + EOT[name]] + expected(name, ["It is 21 degrees."])
    assert "get_weather" in data.render(tok, TOOL_TURNS[:1], TOOLS, generation_prompt=True)   # tools reach the template


@pytest.mark.parametrize("name", NAMES)
def test_dpo_split_and_eval_choice_use_the_same_spans(tok, name):
    use(tok, name)
    prompt = TURNS[:3]
    row = {"prompt": prompt, "chosen": [{"role": "assistant", "content": "Bye."}],
           "rejected": [{"role": "assistant", "content": "No way."}]}
    (pair,), counts = data.dpo_strings([row], tok, 512)
    assert counts.dropped == 0
    assert pair["prompt"] == tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    assert [pair["chosen"], pair["rejected"]] == [expected(name, ["Bye."])[0], expected(name, ["No way."])[0]]
    enc = data.encode(tok, prompt + [{"role": "assistant", "content": "No way."}], only_last=True)
    assert tok.decode([t for t in enc.labels if t != -100]) == expected(name, ["No way."])[0]


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

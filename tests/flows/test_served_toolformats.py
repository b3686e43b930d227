"""Issue 39 part 5 end to end: the built-in server reads a family's tool-call text the way its template writes it,
through the OpenAI, Anthropic and Responses routes, whole and streamed, with the official clients.

The toy model writes no tool calls of its own, so its engine is scripted at the engine boundary: `submit_many`
emits the token ids of a family's real tool-call text (with the family's markers made special tokens of the toy's
tokenizer where the real tokenizer has them as special tokens). Everything after the engine is real: the chat
template (the family's fixture), the detokenization that keeps special tokens for the parser, the ToolFormat the
server detects from the template, the SSE chunks, and the translation to Anthropic and Responses events."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.support.serve_fixtures import KEY, start_server
from tests.support.templates import TEMPLATES

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                           "parameters": SCHEMA}}]
A_TOOLS = [{"name": "get_weather", "description": "the weather in a city", "input_schema": SCHEMA}]
R_TOOLS = [{"type": "function", "name": "get_weather", "description": "the weather in a city", "parameters": SCHEMA}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
THOUGHT = "I should look it up."

FAMILIES = {   # fixture -> (its markers that are special tokens on the real tokenizer, what the model writes,
              # the reasoning in it)
    "openai-gpt-oss-120b": (
        ["<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|call|>", "<|constrain|>", "<|return|>"],
        f"<|channel|>analysis<|message|>{THOUGHT}<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>', THOUGHT),
    "Qwen-Qwen3.5-4B": (    # the generation prompt opened <think>: the answer starts inside it
        [], f"{THOUGHT}\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "</function>\n</tool_call>", THOUGHT),
    "deepseek-ai-DeepSeek-V3.1": (
        ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
         "<｜tool▁calls▁end｜>"],
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜>", None),
}


@pytest.fixture(scope="module")
def live(toy_dir, tmp_path_factory):
    server, names, stop = start_server("toy", max_model_len=2048, work_dir=tmp_path_factory.mktemp("toolformats"))
    yield server, names.base
    stop()


@pytest.fixture(params=list(FAMILIES))
def family(request, live, monkeypatch):
    """The served toy speaking one family: its template, its special tokens, its tool-call text from the engine."""
    from swiftbox.serving import toolformats
    from swiftbox.serving.builtin.backend import special_tokens

    name = request.param
    special, text, thought = FAMILIES[name]
    backend = live[0].server.config.app.state.backend
    tok = backend.tokenizer
    if special:
        tok.add_tokens(special, special_tokens=True)       # special, as on the real tokenizer (the toy keeps its own)
    template = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    monkeypatch.setattr(tok, "chat_template", template)
    monkeypatch.setattr(backend, "thinking", toolformats.thinks(template))
    monkeypatch.setattr(backend, "special_tokens", special_tokens(tok))
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert all(s in tok.convert_ids_to_tokens(ids) for s in special if s in text)   # each marker: one special token

    def submit_many(prompt_ids, params, adapter, sinks, loop, **kwargs):
        for sink in sinks:
            for token in ids[:params[0].max_tokens]:
                sink(("token", token))
            sink(("done", "stop" if len(ids) <= params[0].max_tokens else "length"))
        return [SimpleNamespace(cancel=lambda: None) for _ in sinks]

    monkeypatch.setattr(backend.engine, "submit_many", submit_many)
    return SimpleNamespace(name=name, thought=thought, model=live[1], url=live[0].url, special=special)


def no_markup(text, special) -> None:
    assert not any(s in (text or "") for s in special + ["<tool_call>", "</think>"]), text


def test_openai_chat_whole_and_streamed(family):
    client = openai.OpenAI(base_url=family.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    r = client.chat.completions.create(model=family.model, messages=ASK, tools=TOOLS, max_tokens=200)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert (choice.message.model_extra or {}).get("reasoning_content") == family.thought

    chunks = [c for c in client.chat.completions.create(model=family.model, messages=ASK, tools=TOOLS,
                                                         max_tokens=200, stream=True) if c.choices]
    deltas = [c.choices[0].delta for c in chunks]
    thought = [(d.model_extra or {}).get("reasoning_content") for d in deltas]
    thought = [t for t in thought if t]
    if family.thought:
        assert "".join(thought) == family.thought and len(thought) > 1       # token by token, not at the end
    else:
        assert not thought
    for d in deltas:
        no_markup(d.content, family.special)
    pieces = [tc for d in deltas for tc in (d.tool_calls or [])]
    first, *rest = pieces
    assert first.index == 0 and first.id and first.type == "function" and first.function.name == "get_weather"
    assert all(p.index == 0 and p.id is None and p.function.name is None for p in rest)
    assert json.loads(first.function.arguments + "".join(p.function.arguments for p in rest)) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_anthropic_messages_whole_and_streamed(family):
    client = anthropic.Anthropic(base_url=family.url, api_key=KEY, max_retries=0, timeout=120)
    m = client.messages.create(model=family.model, max_tokens=200, tools=A_TOOLS, messages=ASK)
    assert m.stop_reason == "tool_use"
    (use,) = [b for b in m.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    assert [b.thinking for b in m.content if b.type == "thinking"] == ([family.thought] if family.thought else [])
    events = list(client.messages.create(model=family.model, max_tokens=200, tools=A_TOOLS, messages=ASK,
                                         stream=True))
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert [b.name for b in starts if b.type == "tool_use"] == ["get_weather"]
    partial = "".join(e.delta.partial_json for e in events
                      if e.type == "content_block_delta" and e.delta.type == "input_json_delta")
    assert json.loads(partial) == {"city": "Paris"}
    assert [e.delta.stop_reason for e in events if e.type == "message_delta"] == ["tool_use"]


def test_responses_whole_and_streamed(family):
    client = openai.OpenAI(base_url=family.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    r = client.responses.create(model=family.model, input=ASK[0]["content"], tools=R_TOOLS, max_output_tokens=200)
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"} and call.call_id
    events = list(client.responses.create(model=family.model, input=ASK[0]["content"], tools=R_TOOLS,
                                          max_output_tokens=200, stream=True))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"city": "Paris"}
    done = [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "function_call"]
    assert [d.name for d in done] == ["get_weather"]

"""Serving fidelity (issues 39 and 43) on the built-in engine with toy, through the official clients: the field table
at work (a refused SDK parameter is a 400 naming it in each API's shape, no-op values and hints pass, honoured ones
change the answer), Anthropic prefill (the prompt ends inside the last assistant turn, as transformers renders with
continue_final_message) and stop_reason stop_sequence (whole and streamed), the stored Responses (retrieve, delete,
input_items), and no 5xx for wrongly typed Responses / Messages fields (a bounded schemathesis run over both routes;
more examples in the slow suite)."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.serve_fixtures import KEY, start_server

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[2]
ASK = [{"role": "user", "content": "Is 5 odd?"}]
STORY = [{"role": "user", "content": "Tell me a story."}]      # toy answers it greedily with a 21-character question
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def live(toy_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("fidelity")
    server, names, stop = start_server("toy", max_model_len=1024, work_dir=root, trust_request_chat_template=True)
    yield server, names.base
    stop()


@pytest.fixture
def aclient(live):
    return anthropic.Anthropic(base_url=live[0].url, api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture
def oclient(live):
    return openai.OpenAI(base_url=live[0].url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def tokenizer(toy_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(toy_dir)


# -- the field table --------------------------------------------------------------------------------------------

def test_a_refused_sdk_parameter_is_a_400_naming_it(live, oclient, aclient):
    base = live[1]
    with pytest.raises(openai.BadRequestError) as err:
        oclient.chat.completions.create(model=base, messages=ASK, max_tokens=2, web_search_options={})
    assert err.value.body["param"] == "web_search_options" and err.value.body["code"] == "unsupported_field"
    with pytest.raises(openai.BadRequestError) as err:
        oclient.chat.completions.create(model=base, messages=ASK, max_tokens=2,
                                        audio={"voice": "alloy", "format": "wav"})
    assert err.value.body["param"] == "audio" and "audio output" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        oclient.completions.create(model=base, prompt="Is 5 odd?", max_tokens=2, suffix="Yes.")
    assert err.value.body["param"] == "suffix"
    with pytest.raises(openai.BadRequestError) as err:
        oclient.responses.create(model=base, input="hi", max_output_tokens=2, conversation="conv_1")
    assert err.value.body["param"] == "conversation"
    with pytest.raises(anthropic.BadRequestError) as bad:
        aclient.messages.create(model=base, max_tokens=2, messages=ASK, container="c1")
    assert bad.value.body["type"] == "error" and "container" in bad.value.body["error"]["message"]


def test_no_op_values_and_hints_pass(live, oclient):
    """What clients send as defaults (`n: 1`, `logprobs: false`, `modalities: ["text"]`) and the API's hints are
    taken: the answer is the one the bare request gets."""
    base = live[1]
    bare = oclient.chat.completions.create(model=base, messages=ASK, max_tokens=4, **GREEDY)
    dressed = oclient.chat.completions.create(
        model=base, messages=ASK, max_tokens=4, n=1, logprobs=False, modalities=["text"], stream=False,
        user="u1", metadata={"k": "v"}, service_tier="auto", store=True, prompt_cache_key="p",
        safety_identifier="s", parallel_tool_calls=True, prediction={"type": "content", "content": "Yes"},
        extra_body={"audio": None, "functions": []}, **GREEDY)
    assert dressed.choices[0].message.content == bare.choices[0].message.content


def test_reasoning_effort_switches_the_templates_thinking(live, oclient):
    """reasoning_effort reaches the template as enable_thinking (Qwen3's template, sent as the client's own: the
    server trusts client templates here): 'none' renders the empty think block, 'high' does not."""
    qwen3 = (ROOT / "tests/fixtures/templates/Qwen-Qwen3-0.6B.jinja").read_text()
    used = {}
    for effort in ("none", "high"):
        answer = oclient.chat.completions.create(model=live[1], messages=ASK, max_tokens=1, reasoning_effort=effort,
                                                 extra_body={"chat_template": qwen3})
        used[effort] = answer.usage.prompt_tokens
    assert used["none"] > used["high"]


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
CALLS = [{"id": f"call_{k}", "type": "function", "function": {"name": "get_weather", "arguments": f'{{"city": "{c}"}}'}}
         for k, c in enumerate(["Paris", "Rome"])]


@pytest.fixture
def two_calls(live, monkeypatch):
    """Toy writes no tool calls: its answers to a request with tools are read as two calls to get_weather (and
    end at their first character, as a finished call does). What is under test is what is kept of them."""
    from swiftbox.serving.toolformats.base import Parsed

    backend = live[0].server.config.app.state.backend
    real_params = backend.params

    def params(req, *args):
        found = real_params(req, *args)
        if req.tools:
            found.stop = [chr(c) for c in range(32, 127)] + ["\n"]
        return found

    monkeypatch.setattr(backend, "answer_parser", lambda req: lambda text: Parsed(None, None, [dict(c) for c in CALLS]))
    monkeypatch.setattr(backend, "params", params)


def test_parallel_tool_calls_false_keeps_the_first_call(live, oclient, aclient, two_calls):
    base = live[1]
    both = oclient.chat.completions.create(model=base, messages=ASK, tools=TOOLS, max_tokens=4)
    assert [c.id for c in both.choices[0].message.tool_calls] == ["call_0", "call_1"]
    one = oclient.chat.completions.create(model=base, messages=ASK, tools=TOOLS, max_tokens=4,
                                          parallel_tool_calls=False)
    assert [c.id for c in one.choices[0].message.tool_calls] == ["call_0"]
    streamed = [d for chunk in oclient.chat.completions.create(model=base, messages=ASK, tools=TOOLS, max_tokens=4,
                                                               parallel_tool_calls=False, stream=True)
                for choice in chunk.choices for d in choice.delta.tool_calls or []]
    assert {d.index for d in streamed} == {0} and [d.id for d in streamed if d.id] == ["call_0"]
    r_tools = [{"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}]
    answer = oclient.responses.create(model=base, input="Weather?", tools=r_tools, max_output_tokens=4,
                                      parallel_tool_calls=False)
    assert [o.call_id for o in answer.output if o.type == "function_call"] == ["call_0"]
    assert answer.parallel_tool_calls is False            # echoed as sent
    a_tools = [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]
    msg = aclient.messages.create(model=base, max_tokens=4, messages=ASK, tools=a_tools,
                                  tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert [b.id for b in msg.content if b.type == "tool_use"] == ["call_0"]


def test_first_call_only_on_a_streamed_reader():
    """The streamed reader's events (toolformats): calls after the first dropped, text and reasoning kept."""
    from swiftbox.serving.builtin.backend import first_call_only

    events = [("reasoning", "r"), ("call", CALLS[0]), ("text", "t"), ("call", CALLS[1])]
    assert first_call_only(events, 0) == events[:3]
    assert first_call_only(events, 1) == [("reasoning", "r"), ("text", "t")]


# -- Anthropic: prefill and stop sequences -----------------------------------------------------------------------

def test_anthropic_prefill_continues_the_last_assistant_turn(live, aclient, oclient, toy_dir):
    prefill = [*ASK, {"role": "assistant", "content": "Yes, it"}]
    tok = tokenizer(toy_dir)
    rendered = tok.apply_chat_template(prefill, tokenize=False, continue_final_message=True)
    assert rendered.endswith("Yes, it")
    ids = tok(rendered, add_special_tokens=False)["input_ids"]
    counted = aclient.messages.count_tokens(model=live[1], messages=prefill)
    assert counted.input_tokens == len(ids)
    msg = aclient.messages.create(model=live[1], max_tokens=6, messages=prefill, extra_body=GREEDY)
    # the same ids sent as a raw prompt: the same continuation
    raw = oclient.completions.create(model=live[1], prompt=ids, max_tokens=6, temperature=0)
    assert msg.content[0].text == raw.choices[0].text
    # vLLM's chat extras do the same on the chat route
    chat = oclient.chat.completions.create(model=live[1], messages=prefill, max_tokens=6, temperature=0,
                                           extra_body={"continue_final_message": True, "add_generation_prompt": False})
    assert chat.choices[0].message.content == msg.content[0].text and chat.usage.prompt_tokens == len(ids)
    closed = aclient.messages.create(model=live[1], max_tokens=6, messages=ASK, extra_body=GREEDY)
    assert closed.usage.input_tokens != msg.usage.input_tokens


def _stop_inside(aclient, model: str) -> tuple[str, str]:
    """A greedy answer and a stop sequence taken from its middle (so the answer must end before it)."""
    whole = aclient.messages.create(model=model, max_tokens=24, messages=STORY, extra_body=GREEDY).content[0].text
    stripped = whole.strip()
    assert len(stripped) >= 6, whole
    middle = len(whole) // 2
    stop = whole[middle:middle + 3]
    assert stop.strip(), whole
    return whole, stop


def test_anthropic_stop_sequence_reported(live, aclient):
    whole, stop = _stop_inside(aclient, live[1])
    msg = aclient.messages.create(model=live[1], max_tokens=24, messages=STORY, stop_sequences=[stop, "\x01never"],
                                  extra_body=GREEDY)
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop
    assert msg.content[0].text == whole[:whole.index(stop)]
    with aclient.messages.stream(model=live[1], max_tokens=24, messages=STORY, stop_sequences=[stop],
                                 extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
    assert "".join(b.text for b in final.content if b.type == "text") == whole[:whole.index(stop)]
    plain = aclient.messages.create(model=live[1], max_tokens=3, messages=STORY, stop_sequences=["\x01never"],
                                    extra_body=GREEDY)
    assert plain.stop_reason == "max_tokens" and plain.stop_sequence is None


def test_chat_reports_the_matched_stop_string(live, oclient):
    """vLLM's `stop_reason` on a chat choice: the stop string that ended it (what /v1/messages reads)."""
    first = oclient.chat.completions.create(model=live[1], messages=STORY, max_tokens=24, **GREEDY)
    text = first.choices[0].message.content
    stop = text[len(text) // 2:len(text) // 2 + 3]
    again = oclient.chat.completions.create(model=live[1], messages=STORY, max_tokens=24, stop=[stop], **GREEDY)
    assert again.choices[0].finish_reason == "stop" and again.model_extra is not None
    assert again.choices[0].model_extra["stop_reason"] == stop


# -- Responses: retrieve, delete, input_items --------------------------------------------------------------------

def test_responses_retrieve_delete_and_input_items(live, oclient):
    made = oclient.responses.create(model=live[1], input="Is 5 odd?", max_output_tokens=4, metadata={"run": "7"},
                                    temperature=0)
    got = oclient.responses.retrieve(made.id)
    assert got.id == made.id and got.output_text == made.output_text and got.metadata == {"run": "7"}
    items = oclient.responses.input_items.list(made.id)
    assert [(i.type, i.role, i.content[0].text) for i in items.data] == [("message", "user", "Is 5 odd?")]
    oclient.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError) as gone:
        oclient.responses.retrieve(made.id)
    assert gone.value.body["code"] == "not_found" and gone.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError):
        oclient.responses.create(model=live[1], input="more", previous_response_id=made.id, max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        oclient.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        oclient.responses.input_items.list("resp_unknown")


def test_responses_input_items_pages_and_streamed_responses_are_kept(live, oclient):
    turns = [{"role": "user", "content": f"turn {k}"} if k % 2 == 0 else
             {"role": "assistant", "content": f"answer {k}"} for k in range(5)]
    events = list(oclient.responses.create(model=live[1], input=turns, max_output_tokens=3, stream=True))
    final = events[-1].response          # response.incomplete: toy writes on to the limit
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert oclient.responses.retrieve(final.id).output_text == final.output_text
    texts = [i.content[0].text for i in oclient.responses.input_items.list(final.id, order="asc")]
    assert texts == [t["content"] for t in turns]
    page = oclient.responses.input_items.list(final.id, limit=2)       # newest first, two per page
    assert [i.content[0].text for i in page.data] == ["turn 4", "answer 3"] and page.has_more
    assert [i.content[0].text for i in page] == [t["content"] for t in reversed(turns)]   # the SDK follows `after`
    metrics = httpx.get(live[0].url + "/metrics", headers={"x-api-key": KEY}, timeout=30).text
    for route in ("/v1/responses/{id}", "/v1/responses/{id}/input_items"):      # one label per route, not per id
        assert f'route="{route}"' in metrics
    assert final.id not in metrics
    unstored = oclient.responses.create(model=live[1], input="hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        oclient.responses.retrieve(unstored.id)


# -- issue 43: types and limits ----------------------------------------------------------------------------------

@pytest.mark.parametrize("patch", [
    {"tools": [{"type": ["function"], "name": "f"}]},
    {"tools": [{"type": {"x": 1}, "name": "f"}]},
    {"tool_choice": {"type": ["function"], "name": "f"}},
    {"tool_choice": {"type": {"a": 1}}},
    {"input": [{"type": "reasoning", "summary": 5}, {"role": "user", "content": "hi"}]},
    {"input": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": 5}]}]},
    {"tools": [{"type": "function", "name": "f", "parameters": [1]}]},
    {"metadata": {"k": 5}},
    {"metadata": "tags"},
    {"user": ["u"]},
])
def test_wrongly_typed_responses_fields_are_4xx(live, patch):
    body = {"model": live[1], "input": "hi", "max_output_tokens": 2, **patch}
    r = httpx.post(live[0].url + "/v1/responses", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
    assert 400 <= r.status_code < 500 and r.json()["error"]["message"], r.text


@pytest.mark.parametrize("patch", [
    {"tools": [{"type": ["custom"], "name": "f", "input_schema": {}}]},
    {"tool_choice": {"type": ["auto"]}},
    {"thinking": {"type": {"a": 1}}},
    {"metadata": ["x"]},
    {"service_tier": 5},
])
def test_wrongly_typed_messages_fields_are_4xx(live, patch):
    body = {"model": live[1], "max_tokens": 2, "messages": ASK, **patch}
    r = httpx.post(live[0].url + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=120)
    assert r.status_code == 400 and r.json()["type"] == "error", r.text


def test_a_long_input_string_is_taken_like_the_same_message_item(live):
    """The limits agree between equivalent shapes: 5,000 characters as `input` or as a message item."""
    text = "five " * 1000
    post = lambda body: httpx.post(live[0].url + "/v1/responses", headers={"Authorization": f"Bearer {KEY}"},  # noqa: E731
                                   json={"model": live[1], "max_output_tokens": 1, **body}, timeout=120)
    as_string = post({"input": text})
    as_item = post({"input": [{"role": "user", "content": text}]})
    assert as_string.status_code == as_item.status_code == 200, (as_string.text[:300], as_item.text[:300])
    assert as_string.json()["usage"]["input_tokens"] == as_item.json()["usage"]["input_tokens"]


def schemathesis_no_5xx(url: str, examples: int) -> list[str]:
    """Schemathesis over the OpenAPI schema of /v1/responses (create, retrieve, delete, input_items) and POST
    /v1/messages: no answer is a 5xx."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error

    auth = {"Authorization": f"Bearer {KEY}"}
    schema = schemathesis.openapi.from_url(url + "/openapi.json", headers=auth)
    failures = []
    for op in schema.get_all_operations():
        operation = op.ok()
        if not (operation.path.startswith("/v1/responses") or operation.path == "/v1/messages"):
            continue

        @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def check(case):
            case.call_and_validate(base_url=url, headers=auth, checks=[not_a_server_error], timeout=120)

        try:
            check()
        except Exception as exc:  # collect, so one report names every failing route
            failures.append(f"{operation.method.upper()} {operation.path}: {str(exc)[:600]}")
    return failures


def test_schemathesis_responses_and_messages_bounded(live):
    pytest.importorskip("schemathesis")
    assert not schemathesis_no_5xx(live[0].url, examples=12)


@pytest.mark.slow
def test_schemathesis_responses_and_messages_more(live):
    pytest.importorskip("schemathesis")
    assert not schemathesis_no_5xx(live[0].url, examples=150)

"""/v1/messages (Anthropic) and /v1/responses (OpenAI Responses) on the built-in engine, driven by the official
`anthropic` and `openai` clients: whole and streamed, a tool round trip each, on toy and on a runtime-loaded
adapter; errors in each API's shape, the key both ways, bounds, /metrics, the response store; a fuzz for no 5xx.

The toy model writes no tool calls of its own (test_tool_calling.py trains one that does), so for the round trips
the backend's answer parser is replaced by one that reads every first-turn answer as a call to get_weather (with
reasoning): what is under test here is everything around the model - the translation, the chat path, the bodies
and events each client parses.
"""
from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swiftbox.serving.toolformats import Parsed
from tests.support.serve_fixtures import KEY, make_adapter, start_server

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

ADAPTER = "mine"
CALL = {"id": "call_fixed", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
A_TOOLS = [{"name": "get_weather", "description": "the weather in a city", "input_schema": SCHEMA}]
R_TOOLS = [{"type": "function", "name": "get_weather", "description": "the weather in a city", "parameters": SCHEMA}]
ASK = "What is the weather in Paris?"
GREEDY = {"temperature": 0}     # anthropic>=2 has no temperature argument; older clients send it, the API takes it


@pytest.fixture(scope="module")
def live(toy_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("agent-apis")
    make_adapter(toy_dir, root / "mine", seed=3)
    server, names, stop = start_server("toy", max_model_len=2048, adapter_root=[str(root)], work_dir=root)
    r = httpx.post(server.url + "/v1/load_lora_adapter", headers={"Authorization": f"Bearer {KEY}"}, timeout=120,
                   json={"lora_name": ADAPTER, "lora_path": str(root / "mine")})
    assert r.status_code == 200, r.text
    backend = server.server.config.app.state.backend
    real = backend.answer_parser

    def parser(req):
        """First turn with tools: the answer is a get_weather call (after some reasoning); after the tool's
        result: the model's own text."""
        if req.tools and req.messages[-1].role != "tool":
            return lambda text: Parsed(None, "I should look it up.", [dict(CALL)])
        return real(req)

    real_params = backend.params

    def params(req, *args):
        """...and that first turn ends at its first character, as a model's finished tool call does."""
        found = real_params(req, *args)
        if req.tools and req.messages[-1].role != "tool":
            found.stop = [chr(c) for c in range(32, 127)] + ["\n"]
        return found

    backend.answer_parser, backend.params = parser, params
    yield server, names.base
    stop()


@pytest.fixture
def aclient(live):
    return anthropic.Anthropic(base_url=live[0].url, api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture
def oclient(live):
    return openai.OpenAI(base_url=live[0].url + "/v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.mark.parametrize("model", ["base", ADAPTER])
def test_anthropic_client_tool_round_trip_whole(live, aclient, model):
    name = live[1] if model == "base" else model
    first = aclient.messages.create(model=name, max_tokens=8, tools=A_TOOLS, system="Use tools.",
                                    thinking={"type": "enabled", "budget_tokens": 1024},
                                    messages=[{"role": "user", "content": ASK}])
    assert first.stop_reason == "tool_use" and first.role == "assistant" and first.model == name
    kinds = [b.type for b in first.content]
    assert kinds == ["thinking", "tool_use"]
    assert first.content[0].thinking == "I should look it up."
    use = first.content[1]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    second = aclient.messages.create(model=name, max_tokens=6, tools=A_TOOLS, extra_body=GREEDY, messages=[
        {"role": "user", "content": ASK}, {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}]}])
    assert second.stop_reason in ("end_turn", "max_tokens") and second.content[0].type == "text"
    assert second.content[0].text


def test_anthropic_stream_events_and_tool_use(live, aclient):
    with aclient.messages.stream(model=ADAPTER, max_tokens=8, tools=A_TOOLS,
                                 messages=[{"role": "user", "content": ASK}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
    assert "input_json" in kinds and "content_block_start" in kinds and "content_block_stop" in kinds
    assert final.stop_reason == "tool_use"
    (use,) = [b for b in final.content if b.type == "tool_use"]
    assert use.input == {"city": "Paris"}
    assert final.usage.output_tokens > 0
    with aclient.messages.stream(model=ADAPTER, max_tokens=6, extra_body=GREEDY, tools=A_TOOLS, messages=[
            {"role": "user", "content": ASK}, {"role": "assistant", "content": final.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]) as s:
        text = "".join(s.text_stream)
        last = s.get_final_message()
    assert text and last.content[0].text == text and last.stop_reason in ("end_turn", "max_tokens")


def test_anthropic_goes_through_the_chat_path(live, aclient, oclient):
    """Same prompt tokens as the chat route, same greedy answer, and the adapter answers differently."""
    msgs = [{"role": "user", "content": "Is 12 even?"}]
    counted = aclient.messages.count_tokens(model=live[1], messages=msgs, system="Be brief.")
    chat = oclient.chat.completions.create(model=live[1], max_tokens=8, temperature=0,
                                           messages=[{"role": "system", "content": "Be brief."}, *msgs])
    msg = aclient.messages.create(model=live[1], max_tokens=8, extra_body=GREEDY, system="Be brief.", messages=msgs)
    assert counted.input_tokens == chat.usage.prompt_tokens == msg.usage.input_tokens
    assert msg.content[0].text == chat.choices[0].message.content
    other = aclient.messages.create(model=ADAPTER, max_tokens=8, extra_body=GREEDY, system="Be brief.", messages=msgs)
    assert other.content[0].text != msg.content[0].text


def test_anthropic_errors_keys_and_refusals(live, aclient):
    url, base = live[0].url, live[1]
    with pytest.raises(anthropic.BadRequestError) as bad:
        aclient.messages.create(model=base, max_tokens=4, messages=[{"role": "user", "content": "hi"}],
                                extra_body={"container": "x"})
    assert bad.value.body["type"] == "error" and bad.value.body["error"]["type"] == "invalid_request_error"
    assert "container" in bad.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="web_search"):
        aclient.messages.create(model=base, max_tokens=4, messages=[{"role": "user", "content": "hi"}],
                                tools=[{"type": "web_search_20250305", "name": "web_search"}])
    with pytest.raises(anthropic.BadRequestError, match="image"):
        aclient.messages.create(model=base, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    with pytest.raises(anthropic.NotFoundError) as missing:
        aclient.messages.create(model="nope", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert missing.value.body["error"]["type"] == "not_found_error"
    for bad_body in ({"temperature": 1.5}, {"max_tokens": 10**9}, {"top_p": 0}, {"stop_sequences": [""]}):
        body = {"model": base, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], **bad_body}
        r = httpx.post(url + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60)
        assert r.status_code == 400 and r.json()["type"] == "error", (bad_body, r.text)
    with pytest.raises(anthropic.AuthenticationError) as denied:
        anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0).messages.create(
            model=base, max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert denied.value.body["error"]["type"] == "authentication_error"
    bearer = anthropic.Anthropic(base_url=url, auth_token=KEY, max_retries=0, timeout=120)   # Authorization: Bearer
    assert bearer.messages.create(model=base, max_tokens=2, messages=[{"role": "user", "content": "hi"}]).content
    big = httpx.post(url + "/v1/messages", content=b"x" * (5 * 1024 * 1024), headers={"x-api-key": KEY}, timeout=60)
    assert big.status_code == 413 and big.json()["error"]["type"] == "request_too_large"


@pytest.mark.parametrize("model", ["base", ADAPTER])
def test_responses_client_tool_round_trip_whole(live, oclient, model):
    name = live[1] if model == "base" else model
    first = oclient.responses.create(model=name, input=ASK, tools=R_TOOLS, instructions="Use tools.",
                                     max_output_tokens=8, reasoning={"effort": "low"})
    assert first.status == "completed" and first.model == name
    assert [o.type for o in first.output] == ["reasoning", "function_call"]
    call = first.output[1]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    second = oclient.responses.create(model=name, previous_response_id=first.id, tools=R_TOOLS, max_output_tokens=6,
                                      input=[{"type": "function_call_output", "call_id": call.call_id,
                                              "output": "sunny, 21 C"}])
    assert second.output_text and second.previous_response_id == first.id
    # the same conversation sent whole instead of by reference: the same prompt
    again = oclient.responses.create(model=name, tools=R_TOOLS, max_output_tokens=6, input=[
        {"role": "user", "content": ASK}, {"type": "reasoning", "id": "rs_1", "summary": [
            {"type": "summary_text", "text": "I should look it up."}]},
        {"type": "function_call", "call_id": call.call_id, "name": "get_weather", "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}])
    assert again.usage.input_tokens == second.usage.input_tokens


def test_responses_stream_events_and_store(live, oclient):
    with oclient.responses.stream(model=ADAPTER, input=ASK, tools=R_TOOLS, max_output_tokens=8) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    for kind in ("response.output_item.added", "response.function_call_arguments.delta",
                 "response.function_call_arguments.done", "response.output_item.done"):
        assert kind in kinds
    (call,) = [o for o in final.output if o.type == "function_call"]
    assert json.loads(call.arguments) == {"city": "Paris"}
    events = list(oclient.responses.create(model=ADAPTER, previous_response_id=final.id, stream=True, store=False,
                                           max_output_tokens=6, input=[{"type": "function_call_output",
                                                                        "call_id": call.call_id, "output": "sunny"}]))
    kinds = [e.type for e in events]
    for kind in ("response.content_part.added", "response.output_text.delta", "response.output_text.done"):
        assert kind in kinds
    assert kinds[-1] == ("response.incomplete" if events[-1].response.usage.output_tokens == 6 else
                         "response.completed")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and events[-1].response.output_text == text
    with pytest.raises(openai.NotFoundError, match="Previous response"):      # store: false was not kept
        oclient.responses.create(model=ADAPTER, previous_response_id=events[-1].response.id, input="more")
    with pytest.raises(openai.BadRequestError, match="web_search"):        # required, and not offered: refused
        oclient.responses.create(model=ADAPTER, input="hi", tools=[{"type": "web_search"}],
                                 tool_choice={"type": "web_search"})
    listed = oclient.responses.create(model=ADAPTER, input="hi", tools=[{"type": "web_search"}], max_output_tokens=2)
    assert listed.status in ("completed", "incomplete")         # listed only (as Codex does): accepted, not offered
    with pytest.raises(openai.BadRequestError, match="text.format"):     # structured output: a format it knows
        oclient.responses.create(model=ADAPTER, input="hi", text={"format": {"type": "xml"}})


def test_store_is_bounded():
    from swiftbox.serving.errors import ApiError
    from swiftbox.serving.responses.store import ResponseStore

    store = ResponseStore(max_responses=2, max_chars=200)
    for k in range(3):
        store.put(f"r{k}", "toy", [{"role": "user", "content": "x"}])
    assert len(store) == 2 and store.get("r2")[0] == "toy"
    with pytest.raises(ApiError) as gone:
        store.get("r0")
    assert gone.value.status == 404
    store.put("big", "toy", [{"role": "user", "content": "y" * 150}])   # pushes the older ones out by size
    assert len(store) == 1 and store.get("big")


def test_new_routes_counted_and_behind_the_key(live):
    url = live[0].url
    for path in ("/v1/messages", "/v1/messages/count_tokens", "/v1/responses"):
        assert httpx.post(url + path, json={}, timeout=30).status_code == 401
    metrics = httpx.get(url + "/metrics", headers={"x-api-key": KEY}, timeout=30).text
    for path in ("/v1/messages", "/v1/messages/count_tokens", "/v1/responses"):
        assert f'route="{path}"' in metrics


# JSON has no NaN/inf (the client cannot even send them): finite floats only
JSONV = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70)
                     | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                  max_size=3), max_leaves=8)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(route=st.sampled_from(["/v1/messages", "/v1/messages/count_tokens", "/v1/responses"]),
       key=st.sampled_from(["model", "messages", "max_tokens", "system", "tools", "tool_choice", "thinking", "input",
                            "instructions", "max_output_tokens", "reasoning", "stop_sequences", "temperature",
                            "previous_response_id", "top_k"]),
       value=JSONV)
def test_fuzz_new_routes_never_5xx(live, route, key, value):
    """A valid body with one field replaced by arbitrary JSON: a 2xx or a 4xx in the route's shape, never 5xx."""
    base = {"model": live[1], "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    if route == "/v1/responses":
        base = {"model": live[1], "max_output_tokens": 2, "input": "hi"}
    r = httpx.post(live[0].url + route, json={**base, key: value}, headers={"x-api-key": KEY}, timeout=120)
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        assert ("type" in r.json() and "error" in r.json()) if "messages" in route else "error" in r.json()

"""serving/openai/render.py, the one place OpenAI bodies are built: the shapes OpenAI clients read, field by field
(which keys are always there, null or not, and which are left out), without a model; the typed engine event stream
(events.py) rendered as OpenAI chunks and Anthropic events, and an OpenAI stream read back into it."""
from __future__ import annotations

import json

from swiftbox.serving import events as ev
from swiftbox.serving.answer import Output, output
from swiftbox.serving.errors import ApiError
from swiftbox.serving.openai import read
from swiftbox.serving.openai.protocol import DeltaMessage
from swiftbox.serving.openai.render import DONE, ChatChunks, ResponseBuilder
from swiftbox.serving.protocol import usage
from swiftbox.serving.render import model_list
from swiftbox.serving.toolformats import parse


def events(text: str) -> dict:
    assert text.startswith("data: ") and text.endswith("\n\n")
    return json.loads(text[len("data: "):])


def test_chat_body_and_tool_calls_finish_reason():
    rb = ResponseBuilder(id="chatcmpl-1", created=7, model="toy")
    hermes = lambda t: parse(t, "hermes", tool_names={"add"})  # noqa: E731
    plain = output(0, "hello", "stop")
    called = output(1, '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', "stop", hermes)
    body = rb.chat([plain, called], usage(5, 3)).model_dump()
    assert body["object"] == "chat.completion" and body["usage"] == {"prompt_tokens": 5, "completion_tokens": 3,
                                                                      "total_tokens": 8}
    first, second = body["choices"]
    assert first == {"index": 0, "message": {"role": "assistant", "content": "hello"}, "logprobs": None,
                     "finish_reason": "stop"}
    assert second["finish_reason"] == "tool_calls" and second["message"]["content"] is None
    call = second["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"] == {"name": "add", "arguments": '{"a": 1}'}
    assert "index" not in call                     # only stream chunks number their calls


def test_stream_chunks_carry_usage_only_when_asked():
    quiet = ResponseBuilder(id="c", created=1, model="m")
    asked = ResponseBuilder(id="c", created=1, model="m", include_usage=True)
    chunk = events(quiet.chat_chunk(0, DeltaMessage(role="assistant", content="")))
    assert "usage" not in chunk and chunk["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events(asked.chat_chunk(0, DeltaMessage(content="x")))["usage"] is None
    last = events(asked.usage_chunk("completion", usage(2, 1)))
    assert last["object"] == "text_completion" and last["choices"] == [] and last["usage"]["total_tokens"] == 3
    assert DONE == "data: [DONE]\n\n"


def test_chat_chunks_render_the_typed_event_stream():
    """openai/render.ChatChunks: role chunks first, a token's logprobs ride on its choice's next chunk (once), a
    streamed call opens (index, id, type, name) then sends its arguments, a call read whole goes out in one delta,
    the finish carries the stop string, usage only when asked, a failure as OpenAI's error event."""
    rb = ResponseBuilder(id="c", created=1, model="m", include_usage=True)
    render = ChatChunks(rb)
    stream = [ev.Started(2), ev.TokenLogprob(0, "Hi", -0.5, (("Hi", -0.5), ("Yo", -1.0))),
              ev.ReasoningDelta(0, "think"), ev.TextDelta(1, "b"), ev.TextDelta(0, "sure"),
              ev.ToolCallDelta(0, 0, "call_1", "f"), ev.ToolCallDelta(0, 0, arguments='{"a": 1}'),
              ev.ToolCallDelta(1, 0, "call_2", "g", "{}"), ev.TokenLogprob(0, "<", -9.0),
              ev.Finish(0, "tool_calls"), ev.Finish(1, "stop", "END"), ev.Done(usage(3, 4))]
    sent = [events(c) for e in stream for c in render.feed(e)]
    choices = [c["choices"][0] if c["choices"] else None for c in sent]
    assert [c["delta"] for c in choices[:2]] == [{"role": "assistant", "content": ""}] * 2
    assert [c["index"] for c in choices[:2]] == [0, 1] and choices[0]["logprobs"] is None
    assert choices[2]["delta"] == {"reasoning_content": "think"}
    assert choices[2]["logprobs"]["content"][0] == {
        "token": "Hi", "logprob": -0.5, "bytes": [72, 105],
        "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
                         {"token": "Yo", "logprob": -1.0, "bytes": [89, 111]}]}
    assert (choices[3]["index"], choices[3]["delta"], choices[3]["logprobs"]) == (1, {"content": "b"}, None)
    assert choices[4]["delta"] == {"content": "sure"} and choices[4]["logprobs"] is None
    assert choices[5]["delta"]["tool_calls"] == [{"index": 0, "id": "call_1", "type": "function",
                                                  "function": {"name": "f", "arguments": ""}}]
    assert choices[6]["delta"]["tool_calls"] == [{"index": 0, "function": {"arguments": '{"a": 1}'}}]
    assert choices[7]["delta"]["tool_calls"] == [{"index": 0, "id": "call_2", "type": "function",
                                                  "function": {"name": "g", "arguments": "{}"}}]
    assert choices[8]["finish_reason"] == "tool_calls" and choices[8]["delta"] == {}
    assert choices[8]["logprobs"]["content"][0]["token"] == "<" and "stop_reason" not in choices[8]
    assert (choices[9]["finish_reason"], choices[9]["stop_reason"]) == ("stop", "END")
    assert choices[10] is None and sent[10]["usage"]["total_tokens"] == 7
    quiet = ChatChunks(ResponseBuilder(id="c", created=1, model="m"))
    assert quiet.feed(ev.Done(usage(1, 1))) == []
    failed = events(quiet.feed(ev.Failed(ApiError(503, "boom", type="server_error")))[0])
    assert failed["error"]["message"] == "boom"


def test_anthropic_events_from_the_typed_stream():
    """anthropic/render.MessagesBuilder over typed events: a thinking block, a text block, a tool_use block whose
    arguments stream as input_json_delta, and the stop sequence that matched as stop_reason stop_sequence."""
    from swiftbox.serving.anthropic.render import MessagesBuilder

    bodies = MessagesBuilder("m")
    out = bodies.start()
    for e in [ev.ReasoningDelta(0, "hm"), ev.TextDelta(0, "a"), ev.TextDelta(0, "b"),
              ev.ToolCallDelta(0, 0, "toolu_1", "f"), ev.ToolCallDelta(0, 0, arguments="{}")]:
        out += bodies.feed(e)
    out += bodies.feed(ev.Finish(0, "tool_calls")) + bodies.end(usage(2, 3))
    sent = [json.loads(e.split("data: ", 1)[1]) for e in out]
    kinds = [b["type"] for b in sent]
    assert kinds == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
                     "message_stop"]
    assert sent[9]["content_block"] == {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    assert sent[10]["delta"] == {"type": "input_json_delta", "partial_json": "{}"}
    assert sent[12]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    stopped = MessagesBuilder("m")
    tail = stopped.feed(ev.TextDelta(0, "x")) + stopped.feed(ev.Finish(0, "stop", "END")) + stopped.end(None)
    assert json.loads(tail[-2].split("data: ", 1)[1])["delta"] == {"stop_reason": "stop_sequence",
                                                                    "stop_sequence": "END"}


def test_an_openai_stream_reads_back_into_typed_events():
    """openai/read.events (the vLLM relay's stream): split across arbitrary byte boundaries, every kind of delta
    comes back as its typed event, and the body is closed at the end."""
    import asyncio

    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "r"},
                      "logprobs": {"content": [{"token": "r", "logprob": -1.0, "bytes": [114],
                                                "top_logprobs": [{"token": "r", "logprob": -1.0}]}]}}]},
        {"choices": [{"index": 0, "delta": {"content": "hi"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                                            "function": {"name": "f", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "END"}]},
        {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}},
        {"error": {"message": "late", "type": "server_error"}}]
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    closed = []

    class Body:
        def __init__(self):
            self.parts = iter([text[k:k + 7].encode() for k in range(0, len(text), 7)])

        def __aiter__(self):
            return self

        async def __anext__(self):
            try:
                return next(self.parts)
            except StopIteration:
                raise StopAsyncIteration from None

        async def aclose(self):
            closed.append(True)

    async def collect():
        return [e async for e in read.events(Body())]

    got = asyncio.run(collect())
    assert got[:8] == [ev.Started(1), ev.TokenLogprob(0, "r", -1.0, (("r", -1.0),)), ev.ReasoningDelta(0, "r"),
                       ev.TextDelta(0, "hi"), ev.ToolCallDelta(0, 0, "c1", "f"), ev.ToolCallDelta(0, 0, arguments="{}"),
                       ev.Finish(0, "stop", "END"), ev.Done(usage(2, 5))]
    assert isinstance(got[8], ev.Failed) and got[8].error.message == "late" and len(got) == 9
    assert closed == [True]


def test_completion_body_and_model_list():
    body = ResponseBuilder(id="cmpl-1", created=1, model="m").completion([Output(0, "ab", "length")], usage(1, 2))
    assert body.model_dump()["choices"] == [{"index": 0, "text": "ab", "logprobs": None, "finish_reason": "length"}]
    listed = model_list(["base", "tuned"]).model_dump()["data"]
    assert [(m["id"], m["root"], m["parent"]) for m in listed] == [("base", "base", None), ("tuned", "base", "base")]


def test_an_event_stream_gathered_whole_and_a_client_gone_closes_it():
    """answer.gathered: choice 0's deltas joined into one Output (calls with their arguments, the stop string),
    a Failed event raised, and a client that went away gets None while the stream is closed (its sequences freed)."""
    import asyncio

    import pytest

    from swiftbox.serving.answer import gathered

    class Client:
        def __init__(self, gone: bool):
            self.gone = gone

        async def is_disconnected(self) -> bool:
            return self.gone

    async def answer(stream, wait: float = 0.0):
        for e in stream:
            await asyncio.sleep(wait)
            yield e

    stream = [ev.Started(1), ev.ReasoningDelta(0, "r"), ev.TextDelta(0, "a"), ev.TextDelta(0, "b"),
              ev.ToolCallDelta(0, 0, "c1", "f"), ev.ToolCallDelta(0, 0, arguments='{"x"'),
              ev.ToolCallDelta(0, 0, arguments=": 1}"), ev.Finish(0, "stop", "END"), ev.Done(usage(2, 3))]
    o, used = asyncio.run(gathered(answer(stream), Client(False)))
    assert (o.text, o.reasoning, o.finish_reason, o.stop_reason) == ("ab", "r", "stop", "END")
    assert o.tool_calls == [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]
    assert used.total_tokens == 5
    with pytest.raises(ApiError, match="boom"):
        asyncio.run(gathered(answer([ev.Started(1), ev.Failed(ApiError(503, "boom"))]), Client(False)))
    closed = []

    async def slow():
        try:
            while True:
                await asyncio.sleep(0.05)
                yield ev.TextDelta(0, "x")
        finally:
            closed.append(True)

    assert asyncio.run(gathered(slow(), Client(True))) is None and closed == [True]

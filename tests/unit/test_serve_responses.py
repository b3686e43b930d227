"""serving/openai/render.py, the one place OpenAI bodies are built: the shapes OpenAI clients read, field by field
(which keys are always there, null or not, and which are left out), without a model."""
from __future__ import annotations

import json

from swiftbox.serving.answer import Output, output
from swiftbox.serving.openai.protocol import DeltaMessage
from swiftbox.serving.openai.render import DONE, ResponseBuilder
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


def test_a_parsed_answer_streams_text_then_numbered_calls_then_the_finish():
    rb = ResponseBuilder(id="c", created=1, model="m")
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    chunks = [events(c)["choices"][0] for c in rb.chat_output_chunks(
        Output(0, "sure", "tool_calls", reasoning="think", tool_calls=[call], logprobs={"content": []}))]
    assert chunks[0]["delta"] == {"content": "sure", "reasoning_content": "think"}
    assert chunks[0]["logprobs"] == {"content": []} and chunks[1]["logprobs"] is None
    assert chunks[1]["delta"]["tool_calls"][0]["index"] == 0
    assert chunks[2] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}


def test_completion_body_and_model_list():
    body = ResponseBuilder(id="cmpl-1", created=1, model="m").completion([Output(0, "ab", "length")], usage(1, 2))
    assert body.model_dump()["choices"] == [{"index": 0, "text": "ab", "logprobs": None, "finish_reason": "length"}]
    listed = model_list(["base", "tuned"]).model_dump()["data"]
    assert [(m["id"], m["root"], m["parent"]) for m in listed] == [("base", "base", None), ("tuned", "base", "base")]

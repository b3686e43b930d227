"""The one place that builds OpenAI bodies: chat and text completions, whole or as SSE events. Routes and
engines never write a body by hand; they hand over what was generated.

What an engine hands over is engine-neutral: one `Output` per choice (answer.py) plus the token `Usage`. A
`ResponseBuilder` (one per request: id, created, model, whether the client asked for usage in the stream) turns
those into the endpoint's body. Token logprobs are shaped by openai/logprobs.py.

    rb = ResponseBuilder.start("chat", req.model, include_usage=req.include_usage)
    rb.chat([output(0, text, "stop", parser)], usage(12, 5))        # -> ChatCompletionResponse
    rb.chat_chunk(0, DeltaMessage(content="Hel"))                  # -> 'data: {...}\n\n'
    rb.usage_chunk(usage(12, 5)); DONE
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from swiftbox.serving.openai.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionResponse,
    DeltaMessage,
    FunctionCall,
    ToolCallBody,
)
from swiftbox.serving.protocol import Usage, new_id, now
from swiftbox.serving.render import sse

if TYPE_CHECKING:
    from swiftbox.serving.answer import Output
    from swiftbox.serving.errors import ApiError

Endpoint = Literal["chat", "completion"]
DONE = "data: [DONE]\n\n"
ID_PREFIX = {"chat": "chatcmpl", "completion": "cmpl"}


def error_event(err: ApiError) -> str:
    """An error in the middle of a stream (the status line was sent already): OpenAI's error body as an event."""
    return sse(err.body())


def tool_calls(calls: list[dict[str, Any]], indexed: bool = False) -> Optional[list[ToolCallBody]]:
    if not calls:
        return None
    return [ToolCallBody(index=k if indexed else None, id=c["id"], function=FunctionCall(**c["function"]))
            for k, c in enumerate(calls)]



class ResponseBuilder:
    """The bodies of one request: its id, creation time and model name go into each of them."""

    def __init__(self, *, id: str, created: int, model: str, include_usage: bool = False):
        self.id, self.created, self.model, self.include_usage = id, created, model, include_usage

    @classmethod
    def start(cls, endpoint: Endpoint, model: str, *, include_usage: bool = False) -> ResponseBuilder:
        return cls(id=new_id(ID_PREFIX[endpoint]), created=now(), model=model, include_usage=include_usage)

    def _stream_exclude(self) -> Optional[set[str]]:
        return None if self.include_usage else {"usage"}

    # -- chat completions ---------------------------------------------------------------------------------
    def chat(self, outputs: list[Output], usage: Usage) -> ChatCompletionResponse:
        choices = [ChatChoice(index=o.index, message=AssistantMessage(
            content=o.text, reasoning_content=o.reasoning, tool_calls=tool_calls(o.tool_calls)),
            logprobs=o.logprobs, finish_reason=o.finish_reason, stop_reason=o.stop_reason) for o in outputs]
        return ChatCompletionResponse(id=self.id, created=self.created, model=self.model, choices=choices,
                                      usage=usage)

    def chat_chunk(self, index: int, delta: DeltaMessage, finish_reason: Optional[str] = None,
                   logprobs: Optional[dict[str, Any]] = None, stop_reason: Union[str, int, None] = None) -> str:
        choice = ChatChunkChoice(index=index, delta=delta, logprobs=logprobs, finish_reason=finish_reason,
                                 stop_reason=stop_reason)
        body = ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=[choice])
        return sse(body, self._stream_exclude())

    def chat_output_chunks(self, o: Output) -> list[str]:
        """A parsed answer streamed at its end: its text (and reasoning), its tool calls, then the finish."""
        chunks = []
        lp = o.logprobs
        if o.text or o.reasoning:
            chunks.append(self.chat_chunk(o.index, DeltaMessage(content=o.text or None,
                                                                 reasoning_content=o.reasoning or None), None, lp))
            lp = None
        if o.tool_calls:
            chunks.append(self.chat_chunk(o.index, DeltaMessage(tool_calls=tool_calls(o.tool_calls, indexed=True)),
                                          None, lp))
            lp = None
        chunks.append(self.chat_chunk(o.index, DeltaMessage(), o.finish_reason, lp, stop_reason=o.stop_reason))
        return chunks

    def chat_event_chunks(self, index: int, events: list[tuple[str, Any]], calls_sent: int,
                          logprobs: Optional[dict[str, Any]] = None) -> list[str]:
        """Pieces of an answer read as it streams (toolformats' stream events) as chunks: reasoning and content
        deltas, and each tool call as two `tool_calls` deltas - index, id, type and name first, then its arguments
        (OpenAI's stream shape). `calls_sent`: the calls this choice sent before (the index of the next); the
        logprobs ride on the first chunk."""
        from swiftbox.serving.openai.protocol import FunctionDelta, ToolCallDelta

        chunks = []
        for kind, value in events:
            if kind == "reasoning":
                delta = DeltaMessage(reasoning_content=value)
            elif kind == "text":
                delta = DeltaMessage(content=value)
            else:
                fn = value["function"]
                chunks.append(self.chat_chunk(index, DeltaMessage(tool_calls=[ToolCallDelta(
                    index=calls_sent, id=value["id"], type="function",
                    function=FunctionDelta(name=fn["name"]))]), None, logprobs))
                logprobs = None
                delta = DeltaMessage(tool_calls=[ToolCallDelta(index=calls_sent,
                                                               function=FunctionDelta(arguments=fn["arguments"]))])
                calls_sent += 1
            chunks.append(self.chat_chunk(index, delta, None, logprobs))
            logprobs = None
        return chunks

    # -- text completions ---------------------------------------------------------------------------------
    def completion(self, outputs: list[Output], usage: Usage) -> CompletionResponse:
        choices = [CompletionChoice(index=o.index, text=o.text or "", logprobs=o.logprobs,
                                    finish_reason=o.finish_reason) for o in outputs]
        return CompletionResponse(id=self.id, created=self.created, model=self.model, choices=choices, usage=usage)

    def completion_chunk(self, index: int, text: str, finish_reason: Optional[str] = None,
                         logprobs: Optional[dict[str, Any]] = None) -> str:
        choice = CompletionChoice(index=index, text=text, logprobs=logprobs, finish_reason=finish_reason)
        body = CompletionResponse(id=self.id, created=self.created, model=self.model, choices=[choice])
        return sse(body, self._stream_exclude())

    # -- both ---------------------------------------------------------------------------------------------
    def usage_chunk(self, endpoint: Endpoint, usage: Usage) -> str:
        """The last event before [DONE] when the client asked for stream usage: no choices, the totals."""
        if endpoint == "chat":
            return sse(ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=[],
                                           usage=usage))
        return sse(CompletionResponse(id=self.id, created=self.created, model=self.model, choices=[], usage=usage))

"""The one place that builds OpenAI bodies: chat and text completions, whole or as SSE events. Routes and
engines never write a body by hand; they hand over what was generated.

What an engine hands over is engine-neutral: one `Output` per choice (answer.py) plus the token `Usage`. A
`ResponseBuilder` (one per request: id, created, model, whether the client asked for usage in the stream) turns
those into the endpoint's body; a streamed chat answer is rendered from the typed engine events (events.py) by
`ChatChunks`. Token logprobs are shaped by openai/logprobs.py.

    rb = ResponseBuilder.start("chat", req.model, include_usage=req.include_usage)
    rb.chat([output(0, text, "stop", parser)], usage(12, 5))        # -> ChatCompletionResponse
    rb.chat_chunk(0, DeltaMessage(content="Hel"))                  # -> 'data: {...}\n\n'
    rb.usage_chunk(usage(12, 5)); DONE
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from swiftbox.serving.openai.logprobs import chat_logprobs
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
    from swiftbox.serving.events import Event, TokenLogprob

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


class ChatChunks:
    """The typed engine event stream (events.py) of one chat request as OpenAI chat chunks: each choice's role
    chunk first, then reasoning / content deltas, each tool call as OpenAI streams it (index, id, type and name
    first, then pieces of its arguments; a call read whole goes out in one delta), the finish (with the stop string
    that matched), and the usage chunk when the client asked for it. A token's logprobs ride on the next chunk of
    its choice. [DONE] is the caller's."""

    def __init__(self, bodies: ResponseBuilder):
        self.bodies = bodies
        self.pending: dict[int, list[TokenLogprob]] = {}

    def _logprobs(self, index: int) -> Optional[dict[str, Any]]:
        return chat_logprobs(self.pending.pop(index, []))

    def _chunk(self, index: int, delta: DeltaMessage) -> str:
        return self.bodies.chat_chunk(index, delta, None, self._logprobs(index))

    def feed(self, event: Event) -> list[str]:
        from swiftbox.serving import events as ev
        from swiftbox.serving.openai.protocol import FunctionDelta
        from swiftbox.serving.openai.protocol import ToolCallDelta as CallDelta

        if isinstance(event, ev.Started):
            return [self.bodies.chat_chunk(i, DeltaMessage(role="assistant", content="")) for i in
                    range(event.choices)]
        if isinstance(event, ev.TokenLogprob):
            self.pending.setdefault(event.index, []).append(event)
            return []
        if isinstance(event, ev.ReasoningDelta):
            return [self._chunk(event.index, DeltaMessage(reasoning_content=event.text))]
        if isinstance(event, ev.TextDelta):
            return [self._chunk(event.index, DeltaMessage(content=event.text))]
        if isinstance(event, ev.ToolCallDelta):
            call: Union[ToolCallBody, CallDelta]
            if event.opens and event.arguments is not None:      # a call read whole
                call = ToolCallBody(index=event.call, id=event.id or "",
                                    function=FunctionCall(name=event.name or "", arguments=event.arguments))
            elif event.opens:
                call = CallDelta(index=event.call, id=event.id, type="function",
                                 function=FunctionDelta(name=event.name))
            else:
                call = CallDelta(index=event.call, function=FunctionDelta(arguments=event.arguments or ""))
            return [self._chunk(event.index, DeltaMessage(tool_calls=[call]))]
        if isinstance(event, ev.Finish):
            return [self.bodies.chat_chunk(event.index, DeltaMessage(), event.reason, self._logprobs(event.index),
                                           stop_reason=event.stop_sequence)]
        if isinstance(event, ev.Done):
            return [self.bodies.usage_chunk("chat", event.usage)] if self.bodies.include_usage else []
        return [error_event(event.error)]

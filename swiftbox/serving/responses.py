"""The one place that builds response bodies: chat and text completions, whole or as SSE events, their
logprobs, the model list and health. Routes and engines never write a body by hand; they hand over what was generated.

What an engine hands over is engine-neutral: one `Output` per choice (the answer's text with tool calls and
reasoning already split out, its finish reason, its logprobs in the endpoint's shape) plus the token `Usage`.
A `ResponseBuilder` (one per request: id, created, model, whether the client asked for usage in the stream)
turns those into the endpoint's body. A new endpoint (Anthropic Messages, OpenAI Responses) adds its own
methods here over the same Output, so every engine serves it without knowing it exists.

    rb = ResponseBuilder.start("chat", req.model, include_usage=req.include_usage)
    rb.chat([output(0, text, "stop", parser)], usage(12, 5))        # -> ChatCompletionResponse
    rb.chat_chunk(0, DeltaMessage(content="Hel"))                  # -> 'data: {...}\n\n'
    rb.usage_chunk(usage(12, 5)); DONE
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, Union

from swiftbox.serving.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionResponse,
    DeltaMessage,
    FunctionCall,
    Health,
    ListedModel,
    ModelCard,
    ModelList,
    ResponseBody,
    ToolCallBody,
    Usage,
    new_id,
    now,
)

if TYPE_CHECKING:
    from swiftbox.serving.errors import ApiError
    from swiftbox.serving.toolcalls import Parsed

Endpoint = Literal["chat", "completion"]
DONE = "data: [DONE]\n\n"
FLOOR = -9999.0
ID_PREFIX = {"chat": "chatcmpl", "completion": "cmpl"}


@dataclass
class Output:
    """One finished choice, engine-neutral: every endpoint's body is built from these."""

    index: int
    text: Optional[str]                 # the answer's content (None: the answer is only tool calls)
    finish_reason: Optional[str]        # stop | length | tool_calls | ...
    reasoning: Optional[str] = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)   # {id, type: function, function: {name, arguments}}
    logprobs: Optional[dict[str, Any]] = None


def output(index: int, text: str, finish_reason: Optional[str], parser: Optional[Callable[[str], Parsed]] = None,
           logprobs: Optional[dict[str, Any]] = None) -> Output:
    """The engine's finished text as an Output: tool calls and reasoning split out by `parser` (toolcalls.parse
    for the model's format); finish_reason becomes "tool_calls" where calls were found, as OpenAI reports it."""
    parsed = parser(text) if parser else None
    if parsed is None:
        return Output(index, text, finish_reason, logprobs=logprobs)
    reason = "tool_calls" if parsed.tool_calls and finish_reason == "stop" else finish_reason
    return Output(index, parsed.content, reason, parsed.reasoning, list(parsed.tool_calls), logprobs)


def sse(body: Union[ResponseBody, dict[str, Any]], exclude: Optional[set[str]] = None) -> str:
    """One server-sent event."""
    import json

    text = body.model_dump_json(exclude=exclude) if isinstance(body, ResponseBody) else json.dumps(body)
    return f"data: {text}\n\n"


def error_event(err: ApiError) -> str:
    """An error in the middle of a stream (the status line was sent already): OpenAI's error body as an event."""
    return sse(err.body())


def tool_calls(calls: list[dict[str, Any]], indexed: bool = False) -> Optional[list[ToolCallBody]]:
    if not calls:
        return None
    return [ToolCallBody(index=k if indexed else None, id=c["id"], function=FunctionCall(**c["function"]))
            for k, c in enumerate(calls)]


def model_list(names: list[str]) -> ModelList:
    """GET /v1/models: the base model first, then its adapters (parent: the base)."""
    created = now()
    return ModelList(data=[ListedModel(id=name, created=created, root=names[0], parent=None if i == 0 else names[0])
                           for i, name in enumerate(names)])


def model_card(name: str) -> ModelCard:
    return ModelCard(id=name, created=now())


def health(ok: bool, engine: str) -> Health:
    return Health(status="ok" if ok else "unhealthy", engine=engine)


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
            logprobs=o.logprobs, finish_reason=o.finish_reason) for o in outputs]
        return ChatCompletionResponse(id=self.id, created=self.created, model=self.model, choices=choices,
                                      usage=usage)

    def chat_chunk(self, index: int, delta: DeltaMessage, finish_reason: Optional[str] = None,
                   logprobs: Optional[dict[str, Any]] = None) -> str:
        choice = ChatChunkChoice(index=index, delta=delta, logprobs=logprobs, finish_reason=finish_reason)
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
        chunks.append(self.chat_chunk(o.index, DeltaMessage(), o.finish_reason, lp))
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


# -- logprobs ---------------------------------------------------------------------------------------------
# (token id, (chosen logprob, [(top id, top logprob), ...])) per generated token
Entry = tuple[int, tuple[float, list[tuple[int, float]]]]


class LogprobFormatter:
    """Token logprobs in OpenAI's shapes: chat `{"content": [{token, logprob, bytes, top_logprobs}], "refusal"}`,
    text completions `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`; whole or per stream chunk.
    A token's text is its own decoding (a byte that is part of a longer character decodes to U+FFFD, as in vLLM);
    vLLM's `return_tokens_as_token_ids` gives "token_id:N" instead. Values are floored at -9999.0 (JSON has no
    -inf)."""

    def __init__(self, tokenizer: Any, as_ids: bool = False):
        self.tokenizer, self.as_ids = tokenizer, as_ids
        self._texts: dict[int, str] = {}

    def text(self, token: int) -> str:
        if self.as_ids:
            return f"token_id:{token}"
        found = self._texts.get(token)
        if found is None:
            found = self._texts[token] = self.tokenizer.decode([token])
        return found

    def _item(self, token: int, logprob: float) -> dict:
        text = self.text(token)
        return {"token": text, "logprob": max(logprob, FLOOR), "bytes": list(text.encode("utf-8"))}

    def chat(self, entries: list[Entry]) -> Optional[dict]:
        if not entries:
            return None
        content = [{**self._item(token, lp), "top_logprobs": [self._item(t, v) for t, v in top]}
                   for token, (lp, top) in entries]
        return {"content": content, "refusal": None}

    def completion(self, entries: list[Entry], offset: int) -> tuple[Optional[dict], int]:
        """The legacy shape, and the text offset after these tokens (offsets count characters of the answer,
        starting at `offset`: the echoed prompt's length, or where the previous chunk ended)."""
        if not entries:
            return None, offset
        tokens, values, tops, offsets = [], [], [], []
        for token, (lp, top) in entries:
            text = self.text(token)
            tokens.append(text)
            values.append(max(lp, FLOOR))
            tops.append({self.text(t): max(v, FLOOR) for t, v in top})
            offsets.append(offset)
            offset += len(text)
        return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}, offset

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
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, Sequence, Union

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
    stop_reason: Union[str, int, None] = None      # the stop string that ended it (vLLM's field; None: EOS, length)


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
        from swiftbox.serving.protocol import FunctionDelta, ToolCallDelta

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


# -- logprobs ---------------------------------------------------------------------------------------------
# (token id, (chosen logprob, [(top id, top logprob), ...])) per generated token
Entry = tuple[int, tuple[float, list[tuple[int, float]]]]
PromptEntry = tuple[int, Optional[tuple[float, list[tuple[int, float]]]]]   # an echoed prompt's first: (id, None)


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

    def completion(self, entries: Sequence[PromptEntry], offset: int) -> tuple[Optional[dict], int]:
        """The legacy shape, as vLLM writes it, and the text offset after these tokens (each token's offset is
        `offset` plus the lengths of the token texts before it in this call). `top_logprobs` holds the token itself
        and the `logprobs` most likely (up to logprobs + 1 entries, as OpenAI documents). An echoed prompt's first
        token has no logprob: its entry is (id, None) and its logprob and top_logprobs are null."""
        if not entries:
            return None, offset
        tokens: list[str] = []
        values: list[Optional[float]] = []
        tops: list[Optional[dict[str, float]]] = []
        offsets: list[int] = []
        for token, found in entries:
            text = self.text(token)
            tokens.append(text)
            if found is None:
                values.append(None)
                tops.append(None)
            else:
                lp, top = found
                values.append(max(lp, FLOOR))
                tops.append({text: max(lp, FLOOR), **{self.text(t): max(v, FLOOR) for t, v in top}})
            offsets.append(offset)
            offset += len(text)
        return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}, offset


# -- Anthropic Messages (/v1/messages) ---------------------------------------------------------------------
# The chat answer comes back as an Output (whole) or as translate.pieces (streamed); these shape it.

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def uid(prefix: str) -> str:
    """An id in the Anthropic / Responses style: prefix_hex."""
    import uuid

    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def named_event(name: str, body: dict[str, Any]) -> str:
    """An SSE event with a name line (Anthropic's and the Responses API's streams both carry one)."""
    import json

    return f"event: {name}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"


def _input(value: str) -> Any:
    import json

    try:
        return json.loads(value or "{}")
    except ValueError:
        return {}


class MessagesBuilder:
    """The bodies of one /v1/messages request: the whole message, or its event sequence (message_start,
    content_block_start/delta/stop per block, message_delta with stop_reason and usage, message_stop)."""

    def __init__(self, model: str):
        self.id, self.model = uid("msg"), model
        self.index = -1              # the open block's index (streaming)
        self.open: Optional[str] = None
        self.tools: dict[int, int] = {}  # chat tool index -> block index
        self.reason: Optional[str] = None
        self.stop_sequence: Optional[str] = None     # the stop sequence that ended the answer (streaming)

    def _message(self, content: list[dict], stop: Optional[str], u: Usage,
                 sequence: Optional[str] = None) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": stop, "stop_sequence": sequence,
                "usage": {"input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens}}

    def message(self, o: Output, u: Usage) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if o.reasoning:
            content.append({"type": "thinking", "thinking": o.reasoning, "signature": ""})
        if o.text:
            content.append({"type": "text", "text": o.text})
        for c in o.tool_calls:
            content.append({"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                            "input": _input(c["function"]["arguments"])})
        if isinstance(o.stop_reason, str) and o.finish_reason == "stop":
            return self._message(content, "stop_sequence", u, o.stop_reason)
        return self._message(content, STOP_REASONS.get(o.finish_reason or "stop", "end_turn"), u)

    def count(self, tokens: int) -> dict[str, Any]:
        return {"input_tokens": tokens}

    # -- streaming --------------------------------------------------------------------------------------
    def start(self) -> list[str]:
        return [named_event("message_start", {"type": "message_start",
                                              "message": self._message([], None, Usage(prompt_tokens=0,
                                                                       completion_tokens=0, total_tokens=0))}),
                named_event("ping", {"type": "ping"})]

    def _close(self) -> list[str]:
        if self.open is None:
            return []
        self.open = None
        return [named_event("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def _begin(self, kind: str, block: dict[str, Any]) -> list[str]:
        out = self._close()
        self.index += 1
        self.open = kind
        return out + [named_event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                          "content_block": block})]

    def _delta(self, delta: dict[str, Any]) -> str:
        return named_event("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                                   "delta": delta})

    def feed(self, kind: str, value: Any) -> list[str]:
        """The events for one piece of the chat answer (translate.pieces)."""
        out: list[str] = []
        if kind == "reasoning":
            if self.open != "thinking":
                out += self._begin("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            out.append(self._delta({"type": "thinking_delta", "thinking": value}))
        elif kind == "text":
            if self.open != "text":
                out += self._begin("text", {"type": "text", "text": ""})
            out.append(self._delta({"type": "text_delta", "text": value}))
        elif kind == "tool":
            out += self._begin("tool_use", {"type": "tool_use", "id": value["id"] or f"toolu_{value['index']}",
                                            "name": value["name"] or "", "input": {}})
            self.tools[value["index"]] = self.index
        elif kind == "args":
            index, text = value
            if self.tools.get(index) == self.index and self.open == "tool_use":
                out.append(self._delta({"type": "input_json_delta", "partial_json": text}))
        elif kind == "finish":
            self.reason = STOP_REASONS.get(value, "end_turn")
        elif kind == "stop_sequence":
            self.stop_sequence = value
        elif kind == "error":
            out += self._close()
            out.append(named_event("error", value.anthropic_body()))
        return out

    def _stop_delta(self) -> dict[str, Any]:
        if self.stop_sequence is not None and self.reason == "end_turn":
            return {"stop_reason": "stop_sequence", "stop_sequence": self.stop_sequence}
        return {"stop_reason": self.reason or "end_turn", "stop_sequence": None}

    def end(self, u: Optional[Usage]) -> list[str]:
        u = u or Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0)
        return self._close() + [
            named_event("message_delta", {"type": "message_delta",
                                          "delta": self._stop_delta(),
                                          "usage": {"input_tokens": u.prompt_tokens,
                                                    "output_tokens": u.completion_tokens}}),
            named_event("message_stop", {"type": "message_stop"})]


# -- OpenAI Responses (/v1/responses) ----------------------------------------------------------------------

class ResponsesBuilder:
    """The bodies of one /v1/responses request: the Response object (whole, or created / in_progress /
    completed in a stream) and the typed stream events in between, each with its sequence_number."""

    def __init__(self, model: str, echo: dict[str, Any], names: Optional[dict[str, tuple[str, str]]] = None):
        self.id, self.model, self.echo, self.created = uid("resp"), model, echo, now()
        self.names = names or {}       # flat function name -> (namespace, name): see translate.responses_tools
        self.seq = 0
        self.items: list[dict[str, Any]] = []     # the output items so far (streaming)
        self.open: Optional[dict[str, Any]] = None
        self.calls: dict[int, dict[str, Any]] = {}
        self.reason: Optional[str] = None
        self.final: dict[str, Any] = {}          # the completed Response object, once a stream has ended

    def response(self, status: str, output: list[dict[str, Any]], u: Optional[Usage],
                 reason: Optional[str] = None) -> dict[str, Any]:
        incomplete = status == "incomplete"
        body = {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "error": None, "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
                "model": self.model, "output": output, "parallel_tool_calls": True,
                "text": {"format": {"type": "text"}}, "truncation": "disabled", "metadata": {},
                "usage": None if u is None else {
                    "input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens,
                    "total_tokens": u.total_tokens, "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0}}}
        return {**body, **self.echo}

    def items_of(self, o: Output) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if o.reasoning:
            items.append(self._reasoning(o.reasoning))
        if o.text:
            items.append(self._message(o.text))
        items += [self._call(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in o.tool_calls]
        return items

    def whole(self, o: Output, u: Usage) -> dict[str, Any]:
        return self.response("incomplete" if o.finish_reason == "length" else "completed", self.items_of(o), u)

    @staticmethod
    def _reasoning(text: str) -> dict[str, Any]:
        return {"type": "reasoning", "id": uid("rs"), "summary": [{"type": "summary_text", "text": text}]}

    @staticmethod
    def _message(text: str, status: str = "completed") -> dict[str, Any]:
        return {"type": "message", "id": uid("msg"), "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}

    def _call(self, call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
        """A function_call item; a call to a namespaced function names it as declared, with its namespace."""
        item = {"type": "function_call", "id": uid("fc"), "call_id": call_id, "name": name,
                "arguments": arguments, "status": status}
        if name in self.names:
            item["namespace"], item["name"] = self.names[name]
        return item

    # -- streaming --------------------------------------------------------------------------------------
    def event(self, kind: str, /, **fields: Any) -> str:
        body = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return named_event(kind, body)

    def start(self) -> list[str]:
        first = self.response("in_progress", [], None)
        return [self.event("response.created", response=first), self.event("response.in_progress", response=first)]

    def _close(self) -> list[str]:
        item, self.open = self.open, None
        if item is None:
            return []
        at = len(self.items) - 1
        out = []
        if item["type"] == "message":
            text = item["content"][0]["text"]
            item["status"] = "completed"
            out.append(self.event("response.output_text.done", item_id=item["id"], output_index=at,
                                  content_index=0, text=text, logprobs=[]))
            out.append(self.event("response.content_part.done", item_id=item["id"], output_index=at,
                                  content_index=0, part=item["content"][0]))
        elif item["type"] == "function_call":
            item["status"] = "completed"
            out.append(self.event("response.function_call_arguments.done", item_id=item["id"], output_index=at,
                                  name=item["name"], arguments=item["arguments"]))
        elif item["type"] == "reasoning":
            out.append(self.event("response.reasoning_summary_text.done", item_id=item["id"], output_index=at,
                                  summary_index=0, text=item["summary"][0]["text"]))
            out.append(self.event("response.reasoning_summary_part.done", item_id=item["id"], output_index=at,
                                  summary_index=0, part=item["summary"][0]))
        return out + [self.event("response.output_item.done", output_index=at, item=item)]

    def _begin(self, item: dict[str, Any]) -> list[str]:
        out = self._close()
        self.items.append(item)
        self.open = item
        at = len(self.items) - 1
        added = {**item, "content": []} if item["type"] == "message" else {**item, "summary": []} \
            if item["type"] == "reasoning" else item
        out.append(self.event("response.output_item.added", output_index=at, item=added))
        if item["type"] == "message":
            out.append(self.event("response.content_part.added", item_id=item["id"], output_index=at,
                                  content_index=0, part={"type": "output_text", "text": "", "annotations": []}))
        elif item["type"] == "reasoning":
            out.append(self.event("response.reasoning_summary_part.added", item_id=item["id"], output_index=at,
                                  summary_index=0, part={"type": "summary_text", "text": ""}))
        return out

    def feed(self, kind: str, value: Any) -> list[str]:
        out: list[str] = []
        at = len(self.items) - 1
        if kind == "reasoning":
            if self.open is None or self.open["type"] != "reasoning":
                out += self._begin(self._reasoning(""))
            self.open["summary"][0]["text"] += value      # type: ignore[index]
            out.append(self.event("response.reasoning_summary_text.delta", item_id=self.open["id"],  # type: ignore[index]
                                  output_index=len(self.items) - 1, summary_index=0, delta=value))
        elif kind == "text":
            if self.open is None or self.open["type"] != "message":
                out += self._begin(self._message("", "in_progress"))
            item = self.open
            item["content"][0]["text"] += value          # type: ignore[index]
            out.append(self.event("response.output_text.delta", item_id=item["id"],  # type: ignore[index]
                                  output_index=len(self.items) - 1, content_index=0, delta=value, logprobs=[]))
        elif kind == "tool":
            item = self._call(value["id"] or uid("call"), value["name"] or "", "", "in_progress")
            out += self._begin(item)
            self.calls[value["index"]] = item
        elif kind == "args":
            index, text = value
            item = self.calls.get(index)
            if item is not None and item is self.open:
                item["arguments"] += text
                out.append(self.event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=at, delta=text))
        elif kind == "finish":
            self.reason = value
        elif kind == "error":
            out += self._close()
            out.append(self.event("error", code=value.code, message=value.message, param=value.param))
        return out

    def end(self, u: Optional[Usage]) -> list[str]:
        out = self._close()
        status = "incomplete" if self.reason == "length" else "completed"
        final = self.final = self.response(status, self.items, u)
        return out + [self.event("response.completed" if status == "completed" else "response.incomplete",
                                 response=final)]

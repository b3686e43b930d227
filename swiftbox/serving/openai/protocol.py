"""OpenAI chat and text completions: the request bodies the server accepts and the response / chunk bodies it
sends, as pydantic models.

Requests: every field's type is checked (a wrong type is a 4xx, never a 5xx). Which fields each engine honours,
refuses or takes as a hint is fields.py's table, which the routes consult (fields.screen) with the body as sent; a
field in no table is ignored and logged once per name. Every number is finite and bounded (one request's settings
must never be able to break a shared batch), and every string must be encodable as UTF-8 (a lone surrogate such as
"\ud800" is refused, not a 500).

Responses (from `FunctionCall` on): the shapes only; openai/render.py is the one place that fills them in.
"""
from __future__ import annotations

import json
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from swiftbox.serving.errors import ApiError
from swiftbox.serving.protocol import (
    MAX_STOP,
    MAX_TOKENS,
    MAX_TOP_K,
    ResponseBody,
    Usage,
    bad_format,
    utf8,
)

MAX_N = 8
MAX_TOP_LOGPROBS = 20           # OpenAI's bound for chat; vLLM's default for completions too
MAX_LOGIT_BIAS = 1024           # token ids in one logit_bias
MAX_BIAS = 100                  # OpenAI's range: -100 bans a token, +100 all but forces it
MAX_PROMPTS = 1024              # prompts in one completions request (each is a sequence; the queue bound applies)
MAX_TOKEN_ID = 2**31 - 1        # the engine checks ids against the model's vocabulary


def response_format(value: Any, param: str = "response_format") -> Optional[dict[str, Any]]:
    """OpenAI's chat `response_format`, checked: {type: text} (None: free text), {type: json_object} or
    {type: json_schema, json_schema: {name, schema, strict?, description?}}; a 400 naming `param` otherwise. The
    built-in engine compiles it (builtin/constrained.py); the vLLM engine is sent the body as it came."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise bad_format(f"{param}.type", "'text', 'json_object' or 'json_schema'")
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise bad_format(f"{param}.json_schema", "an object {name, schema, strict}")
    if not isinstance(spec.get("schema"), dict):
        raise bad_format(f"{param}.json_schema.schema", "a JSON schema (an object)")
    name = spec.get("name", "response")
    if not isinstance(name, str) or not 0 < len(name) <= 64:
        raise bad_format(f"{param}.json_schema.name", "a name of 1 to 64 characters")
    if not isinstance(spec.get("strict", False), (bool, type(None))):
        raise bad_format(f"{param}.json_schema.strict", "a boolean")
    return {"type": "json_schema", "json_schema": {"name": name, "schema": spec["schema"],
                                                   "strict": bool(spec.get("strict"))}}


def logit_bias(value: Any) -> Optional[dict[int, float]]:
    """OpenAI's `logit_bias` ({"token id": bias in [-100, 100]}) with integer keys; a 400 naming it otherwise (the
    engine checks the ids against the model's vocabulary)."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_LOGIT_BIAS:
        raise bad_format("logit_bias", f"an object of at most {MAX_LOGIT_BIAS} token ids (strings) to biases")
    out: dict[int, float] = {}
    for key, bias in value.items():
        text = str(key).strip()
        if not text.isdigit() or int(text) >= 2**31:
            raise ApiError(400, f"logit_bias: {key!r} is not a token id (a non-negative integer)", param="logit_bias",
                           code="invalid_value")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -MAX_BIAS <= bias <= MAX_BIAS:
            raise ApiError(400, f"logit_bias: the bias of token {text} must be a number from -{MAX_BIAS} to "
                                f"{MAX_BIAS}", param="logit_bias", code="invalid_value")
        out[int(text)] = float(bias)
    return out


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Fields shared by chat and text completions (OpenAI names; top_k/repetition_penalty as extra body)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    model: str = Field(..., min_length=1, max_length=512)
    max_tokens: Optional[int] = Field(None, ge=1, le=MAX_TOKENS)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1, le=MAX_TOP_K)
    n: int = Field(1, ge=1, le=MAX_N)
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = Field(None, ge=-(2**63), lt=2**63)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    presence_penalty: float = Field(0.0, ge=-2, le=2)
    frequency_penalty: float = Field(0.0, ge=-2, le=2)
    repetition_penalty: float = Field(1.0, ge=0.01, le=10)
    user: Optional[str] = None
    return_tokens_as_token_ids: bool = False      # vLLM's extension: logprob tokens as "token_id:N"
    logit_bias: Optional[dict[int, float]] = None   # token id -> bias (checked by logit_bias() above)

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _logit_bias(cls, value):
        return logit_bias(value)

    @field_validator("stop")
    @classmethod
    def _stop(cls, value):
        if value is None:
            return []
        stops = [value] if isinstance(value, str) else list(value)
        if len(stops) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop sequences")
        if any(not s for s in stops):
            raise ValueError("stop sequences must be non-empty")
        return [utf8(s) for s in stops]

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(..., min_length=1, max_length=256)
    arguments: Union[str, dict[str, Any]] = "{}"


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: Optional[str] = None
    type: Literal["function"] = "function"
    function: ToolFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: Optional[Union[str, list[dict[str, Any]]]] = None
    tool_calls: Optional[list[ToolCall]] = None
    tool_call_id: Optional[str] = None
    name: Optional[str] = None
    reasoning_content: Optional[str] = None

    def for_template(self) -> dict:
        """The message as chat templates read it (tool-call arguments as an object when they are JSON)."""
        out: dict[str, Any] = {"role": "system" if self.role == "developer" else self.role, "content": self.text()}
        if self.tool_calls:
            calls = []
            for c in self.tool_calls:
                args = c.function.arguments
                if isinstance(args, str):
                    try:
                        args = json.loads(args or "{}")
                    except ValueError:
                        pass
                call = {"type": "function", "function": {"name": c.function.name, "arguments": args}}
                calls.append({**call, "id": c.id} if c.id else call)
            out["tool_calls"] = calls
        for key in ("tool_call_id", "name", "reasoning_content"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return utf8(self.content)
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError("only text content parts are supported")
            parts.append(part["text"])
        return utf8("".join(parts))


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1, le=MAX_TOKENS)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], dict[str, Any]]] = None
    parallel_tool_calls: Optional[bool] = None
    chat_template_kwargs: Optional[dict[str, Any]] = None     # vLLM's extension, e.g. {"enable_thinking": false}
    chat_template: Optional[str] = None       # vLLM's: a client's template (needs --trust-request-chat-template)
    reasoning_effort: Optional[Literal["none", "minimal", "low", "medium", "high", "xhigh"]] = None
    continue_final_message: bool = False      # vLLM's: the prompt ends inside the last assistant turn (prefill)
    add_generation_prompt: bool = True        # vLLM's: the assistant's header after the conversation
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: Optional[dict[str, Any]] = None    # structured output, checked by response_format() above
    _format_param: str = PrivateAttr("response_format")  # the field a translated request's format came from

    @field_validator("response_format", mode="before")
    @classmethod
    def _response_format(cls, value):
        return response_format(value)

    @property
    def output_format(self) -> tuple[Optional[str], Optional[dict[str, Any]], str]:
        """(None | 'json_object' | 'json_schema', the schema, the request field that asked for it)."""
        fmt = self.response_format or {}
        return fmt.get("type"), (fmt.get("json_schema") or {}).get("schema"), self._format_param

    @model_validator(mode="before")
    @classmethod
    def _template_fields(cls, data: Any) -> Any:
        """chat_template_kwargs against the allow-list (template_kwargs.py): a 400 naming the key, never a 500."""
        if isinstance(data, dict):
            from swiftbox.serving.template_kwargs import MAX_TEMPLATE_CHARS, check_kwargs

            check_kwargs(data.get("chat_template_kwargs"))
            template = data.get("chat_template")
            if template is not None and not (isinstance(template, str) and len(template) <= MAX_TEMPLATE_CHARS):
                raise ApiError(400, f"chat_template: expected a template string of at most {MAX_TEMPLATE_CHARS} "
                                    "characters", param="chat_template", code="invalid_value")
        return data

    @field_validator("tools")
    @classmethod
    def _tools(cls, value):
        for tool in value or []:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if tool.get("type", "function") != "function" or not isinstance(fn, dict) or not fn.get("name"):
                raise ValueError("each tool must be {type: function, function: {name, parameters}}")
        return value

    @model_validator(mode="after")
    def _merge_max(self):
        if self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        if self.continue_final_message and (self.add_generation_prompt or self.messages[-1].role != "assistant"):
            raise ValueError("continue_final_message needs add_generation_prompt: false and a last assistant message")
        kwargs = self.chat_template_kwargs or {}
        if self.reasoning_effort is not None and "enable_thinking" not in kwargs:
            self.chat_template_kwargs = {**kwargs, "enable_thinking": self.reasoning_effort not in ("none", "minimal")}
        for m in self.messages:
            m.text()  # raises on non-text parts -> 422
        return self

    @property
    def logprob_count(self) -> Optional[int]:
        """None: no logprobs; k: the chosen token's logprob and the k most likely."""
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(SamplingFields):
    """A text completion. `prompt` takes the four forms of OpenAI's API and vLLM's: a string, a list of strings, a
    list of token ids, a list of token-id lists; a list is a batch (choices come back prompt-major: prompt p's
    choice j has index p * n + j). `echo` with `logprobs` returns the prompt's own log-probabilities (the first
    token's is null); `max_tokens: 0` with `echo` scores the prompt without generating (lm-eval's log-likelihood)."""

    prompt: list[Union[str, list[int]]] = Field(...)
    echo: bool = False
    logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    max_tokens: Optional[int] = Field(None, ge=0, le=MAX_TOKENS)

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompts(cls, value):
        """Every form as a list of prompts (strings or token-id lists, not mixed), each non-empty."""
        def ids(item) -> bool:
            return isinstance(item, list) and bool(item) and all(
                isinstance(t, int) and not isinstance(t, bool) for t in item)

        if isinstance(value, str) or ids(value):
            value = [value]
        if not isinstance(value, list) or not value:
            raise ValueError("expected a string, a list of strings, a list of token ids or a list of token-id lists")
        if len(value) > MAX_PROMPTS:
            raise ValueError(f"at most {MAX_PROMPTS} prompts per request")
        if all(isinstance(item, str) for item in value):
            if not all(value):
                raise ValueError("prompt must be non-empty")
            return [utf8(item) for item in value]
        if all(ids(item) for item in value):
            if any(t < 0 or t > MAX_TOKEN_ID for item in value for t in item):
                raise ValueError("token ids must be non-negative integers within the vocabulary")
            return value
        raise ValueError("expected a string, a list of strings, a list of token ids or a list of token-id lists "
                         "(strings and token ids are not mixed; token-id lists are non-empty)")

    @model_validator(mode="after")
    def _zero_tokens(self):
        if self.max_tokens == 0 and not self.echo:
            raise ApiError(400, "max_tokens: 0 generates nothing; it is only meaningful with echo: true (the prompt's "
                                "log-probabilities)", param="max_tokens", code="invalid_value")
        return self

    @property
    def logprob_count(self) -> Optional[int]:
        return self.logprobs


class FunctionCall(ResponseBody):
    name: str
    arguments: str                      # JSON text, as OpenAI sends it


class ToolCallBody(ResponseBody):
    OMIT_IF_NONE = frozenset({"index"})
    index: Optional[int] = None         # only in stream chunks
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(ResponseBody):
    OMIT_IF_NONE = frozenset({"reasoning_content", "tool_calls"})
    role: Literal["assistant"] = "assistant"
    content: Optional[str]
    reasoning_content: Optional[str] = None
    tool_calls: Optional[list[ToolCallBody]] = None


class ChatChoice(ResponseBody):
    OMIT_IF_NONE = frozenset({"stop_reason"})
    index: int
    message: AssistantMessage
    logprobs: Optional[dict[str, Any]] = None
    finish_reason: Optional[str] = None
    stop_reason: Union[str, int, None] = None     # vLLM's: the stop string that ended the answer


class ChatCompletionResponse(ResponseBody):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class FunctionDelta(ResponseBody):
    """A streamed tool call's function: its name in the call's first delta, then pieces of its arguments."""
    OMIT_IF_NONE = frozenset({"name"})
    name: Optional[str] = None
    arguments: str = ""


class ToolCallDelta(ResponseBody):
    """One `tool_calls` entry of a stream chunk, as OpenAI streams them: the first delta of a call carries its index,
    id, type and function name, the later ones only the index and a piece of the arguments."""
    OMIT_IF_NONE = frozenset({"id", "type"})
    index: int
    id: Optional[str] = None
    type: Optional[Literal["function"]] = None
    function: FunctionDelta


class DeltaMessage(ResponseBody):
    OMIT_IF_NONE = frozenset({"role", "content", "reasoning_content", "tool_calls"})
    role: Optional[Literal["assistant"]] = None
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[list[Union[ToolCallBody, ToolCallDelta]]] = None


class ChatChunkChoice(ResponseBody):
    OMIT_IF_NONE = frozenset({"stop_reason"})
    index: int
    delta: DeltaMessage
    logprobs: Optional[dict[str, Any]] = None
    finish_reason: Optional[str] = None
    stop_reason: Union[str, int, None] = None


class ChatCompletionChunk(ResponseBody):
    """One SSE event; `usage` is sent (null, or the totals in the last event) only when the client asked for it."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Optional[Usage] = None


class CompletionChoice(ResponseBody):
    index: int
    text: str
    logprobs: Optional[dict[str, Any]] = None
    finish_reason: Optional[str] = None


class CompletionResponse(ResponseBody):
    """A text completion, and (with `usage` only when asked for) each of its SSE events."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Optional[Usage] = None

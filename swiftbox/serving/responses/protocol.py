"""OpenAI Responses (POST /v1/responses): the request body, as a pydantic model (translated onto the chat
request by responses/translate.py; the Response object and its stream events built by responses/render.py)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, model_validator

from swiftbox.serving.errors import ApiError
from swiftbox.serving.openai.protocol import response_format
from swiftbox.serving.protocol import MAX_ITEMS, MAX_TOKENS, ApiFields, Hint, Tags, bad_format


def responses_format(value: Any, param: str = "text.format") -> Optional[dict[str, Any]]:
    """The Responses API's `text.format` ({type: text | json_object | json_schema, name, schema, strict}) as chat's
    response_format (None: free text); a 400 naming `param` when malformed."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_format(param, "an object {type: text | json_object | json_schema}")
    if value.get("type") != "json_schema":
        return response_format(value, param)
    spec = {k: value[k] for k in ("name", "schema", "strict", "description") if k in value}
    return response_format({"type": "json_schema", "json_schema": spec}, param)


class ResponsesRequest(ApiFields):
    """POST /v1/responses (OpenAI Responses API). `input` as a string has no bound of its own (the body limit and the
    prompt's size bound it, as they bound the same text sent as a message item)."""

    model: str = Field(..., min_length=1, max_length=512)
    input: Union[str, Annotated[list[dict[str, Any]], Field(max_length=MAX_ITEMS)]]
    instructions: Optional[str] = None
    tools: Optional[list[dict[str, Any]]] = Field(None, max_length=MAX_ITEMS)
    tool_choice: Optional[Union[Literal["none", "auto", "required"], dict[str, Any]]] = None
    max_output_tokens: Optional[int] = Field(None, ge=1, le=MAX_TOKENS)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    reasoning: Optional[dict[str, Any]] = None
    stream: bool = False
    store: bool = True
    previous_response_id: Optional[str] = Field(None, min_length=1, max_length=256)
    metadata: Tags = Field(None, max_length=16)            # stored and echoed (OpenAI: 16 pairs)
    user: Hint = None
    service_tier: Hint = None
    prompt_cache_key: Hint = None
    safety_identifier: Hint = None
    parallel_tool_calls: Optional[bool] = None
    truncation: Optional[str] = None
    include: Optional[list[str]] = None
    text: Optional[dict[str, Any]] = None
    background: Optional[bool] = None
    max_tool_calls: Optional[int] = Field(None, ge=0)
    client_metadata: Optional[dict[str, Any]] = None

    @model_validator(mode="before")
    @classmethod
    def _hints(cls, data: Any) -> Any:
        """The accepted hints that would change the answer if they meant more than the default are refused."""
        if not isinstance(data, dict):
            return data
        if isinstance(data.get("text"), dict):
            responses_format(data["text"].get("format"))      # a structured output: a 400 when malformed
        if data.get("truncation") not in (None, "disabled"):
            raise ApiError(400, "truncation: only 'disabled' is supported (a prompt past the context is a 400)",
                           param="truncation", code="unsupported_field")
        if data.get("background"):
            raise ApiError(400, "background: background responses are not supported", param="background",
                           code="unsupported_field")
        include = data.get("include") or []
        if not isinstance(include, list) or any(i != "reasoning.encrypted_content" for i in include):
            raise ApiError(400, "include: only 'reasoning.encrypted_content' is accepted (and nothing is encrypted)",
                           param="include", code="unsupported_field")
        return data

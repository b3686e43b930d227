"""What the Anthropic Messages and OpenAI Responses translations share on their way onto the one chat path: each
request becomes the ChatCompletionRequest the chat route would have received (so prompts, tool parsing, adapters,
limits and isolation are the chat route's). A block or item this server cannot honour is a 400 naming where it is
(messages.2.content.0.type: ...)."""
from __future__ import annotations

import json
from typing import Any, Optional

from swiftbox.serving.errors import ApiError
from swiftbox.serving.openai.protocol import ChatCompletionRequest


def refuse(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param, code="unsupported_field")


def text_blocks(blocks: Any, param: str) -> str:
    """Text of a string or a list of {type: text, text} blocks (cache_control / citations accepted, no effect)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise refused_type(param, "a string or a list of text blocks")
    out = []
    for k, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") not in ("text", "input_text", "output_text"):
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise refuse(f"{param}.{k}.type", f"'{kind}' content is not supported here (text only)")
        if not isinstance(block.get("text"), str):
            raise refused_type(f"{param}.{k}.text", "a string")
        out.append(block["text"])
    return "".join(out)


def refused_type(param: str, expected: str) -> ApiError:
    return ApiError(400, f"{param}: expected {expected}", param=param, code="invalid_value")


def json_args(value: Any, param: str) -> str:
    if isinstance(value, str):
        return value or "{}"
    if value is None:
        return "{}"
    if not isinstance(value, dict):
        raise refused_type(param, "an object")
    return json.dumps(value, ensure_ascii=False)



def formatted(body: dict[str, Any], fmt: Optional[dict[str, Any]], param: str) -> ChatCompletionRequest:
    """The chat request with a structured output (`fmt`: chat's response_format) that came from field `param` (the
    name a schema the engine cannot compile is refused under)."""
    if fmt is not None:
        body["response_format"] = fmt
    chat = validated(body)
    chat._format_param = param
    return chat


def validated(body: dict[str, Any]) -> ChatCompletionRequest:
    from pydantic import ValidationError

    from swiftbox.serving.errors import from_validation

    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        err = from_validation([dict(e) for e in exc.errors()])
        raise ApiError(400, err.message, param=err.param, code="invalid_value") from None

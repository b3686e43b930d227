"""Anthropic Messages (POST /v1/messages, /v1/messages/count_tokens): the request bodies, as pydantic models
(translated onto the chat request by anthropic/translate.py; the answer shaped by anthropic/render.py)."""
from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import Field, field_validator, model_validator

from swiftbox.serving.errors import ApiError
from swiftbox.serving.protocol import (
    MAX_ITEMS,
    MAX_STOP,
    MAX_TOKENS,
    MAX_TOP_K,
    ApiFields,
    Hint,
    bad_format,
    utf8,
)

MAX_STOP_SEQUENCES = MAX_STOP   # Anthropic's stop_sequences: the chat path's bound


def anthropic_format(value: Any, param: str = "output_config.format") -> Optional[dict[str, Any]]:
    """Anthropic's `output_config.format` ({type: json_schema, schema}) as chat's response_format."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "json_schema":
        raise bad_format(f"{param}.type", "'json_schema'")
    if not isinstance(value.get("schema"), dict):
        raise bad_format(f"{param}.schema", "a JSON schema (an object)")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": value["schema"], "strict": True}}


class MessagesRequest(ApiFields):
    """POST /v1/messages (Anthropic Messages API)."""

    model: str = Field(..., min_length=1, max_length=512)
    messages: list[dict[str, Any]] = Field(..., min_length=1, max_length=MAX_ITEMS)
    max_tokens: int = Field(..., ge=1, le=MAX_TOKENS)
    system: Optional[Union[str, list[dict[str, Any]]]] = None
    stop_sequences: Optional[list[str]] = Field(None, max_length=MAX_STOP_SEQUENCES)
    temperature: float = Field(1.0, ge=0, le=1)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1, le=MAX_TOP_K)
    stream: bool = False
    tools: Optional[list[dict[str, Any]]] = Field(None, max_length=MAX_ITEMS)
    tool_choice: Optional[dict[str, Any]] = None
    thinking: Optional[dict[str, Any]] = None
    output_config: Optional[dict[str, Any]] = None    # effort (a hint) and format (structured output)
    metadata: Optional[dict[str, Any]] = None
    service_tier: Hint = None
    speed: Hint = None
    inference_geo: Hint = None
    user_profile_id: Hint = None
    workspace_id: Hint = None
    cache_control: Optional[dict[str, Any]] = None
    diagnostics: Optional[dict[str, Any]] = None

    @model_validator(mode="before")
    @classmethod
    def _output_config(cls, data: Any) -> Any:
        """output_config: its effort is a hint (taken), its format a structured output (anthropic_format checks it).
        context_management: only the edits that change nothing are taken."""
        config = data.get("output_config") if isinstance(data, dict) else None
        if config is not None and (not isinstance(config, dict) or set(config) - {"effort", "format"}):
            raise ApiError(400, "output_config: only 'effort' and 'format' are supported", param="output_config",
                           code="unsupported_field")
        if config is not None:
            anthropic_format(config.get("format"))
        manage = data.get("context_management") if isinstance(data, dict) else None
        if manage is not None:      # Claude Code sends {"edits": [{"type": "clear_thinking_...", "keep": "all"}]}
            edits = manage.get("edits") if isinstance(manage, dict) else None
            noop = [isinstance(e, dict) and e.get("keep") == "all"
                    and str(e.get("type", "")).startswith("clear_thinking") for e in (edits or [])]
            if not isinstance(edits, list) or not all(noop):
                raise ApiError(400, "context_management: only edits that keep everything (clear_thinking with "
                                    "keep: all) are supported; this server does not edit the context",
                               param="context_management", code="unsupported_field")
        return data

    @field_validator("stop_sequences")
    @classmethod
    def _stops(cls, value):
        if any(not s for s in value or []):
            raise ValueError("stop sequences must be non-empty")
        return [utf8(s) for s in value or []]


class CountTokensRequest(MessagesRequest):
    """POST /v1/messages/count_tokens: a Messages body without max_tokens (and nothing to generate)."""

    max_tokens: int = Field(1, ge=1, le=MAX_TOKENS)

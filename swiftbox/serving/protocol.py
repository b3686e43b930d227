"""The bodies every API family shares, as pydantic models: the base of every body the server sends
(`ResponseBody`: a field is always sent, null when None, unless the class names it in OMIT_IF_NONE), the token
`Usage`, the model list and health, the runtime-adapter admin requests, the raw body a relay forwards, and the
bounds and text check every family's request models use.

Each API family keeps its own request and response models beside its route: openai/protocol.py (chat and text
completions), anthropic/protocol.py (Messages), responses/protocol.py (Responses). Validation lives there so every
engine sees the same checked request: a bad value becomes a 4xx in the API's error shape before it reaches a model.
"""
from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer

from swiftbox.serving.errors import ApiError

MAX_STOP = 4
MAX_TOKENS = 1_000_000          # the context check refuses far less; this only keeps the number sane
MAX_TOP_K = 1_000_000           # larger than any vocabulary
MAX_ITEMS = 4096                # messages / input items / content blocks / tools per Messages / Responses request


def utf8(text: str) -> str:
    """Refuse text that cannot be encoded (lone UTF-16 surrogates from JSON escapes like "\ud800")."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text is not valid Unicode (lone surrogate at position {exc.start})") from None
    return text


def bad_format(param: str, expected: str) -> ApiError:
    return ApiError(400, f"{param}: expected {expected}", param=param, code="invalid_value")


class LoadLoraAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    lora_name: str = Field(min_length=1, max_length=256)
    lora_path: str = Field(min_length=1, max_length=4096)

    @field_validator("lora_name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value != value.strip() or any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError("expected a model name without spaces or control characters")
        return utf8(value)

    @field_validator("lora_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("a path cannot contain NUL")
        return utf8(value)


class UnloadLoraAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    lora_name: str = Field(min_length=1, max_length=256)
    lora_int_id: Optional[int] = None          # vLLM's; swiftbox names adapters only by name



async def raw_body(request: Any) -> dict[str, Any]:
    """The JSON body as the client sent it (the vLLM child is sent exactly that)."""
    try:
        data = await request.json()
    except Exception:
        raise ApiError(400, "We could not parse the JSON body of your request", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    return data


class ResponseBody(BaseModel):
    """A body the server sends. Fields in OMIT_IF_NONE are left out while None (OpenAI omits them); every other
    field is always present, null or not, as clients of OpenAI's API expect."""

    model_config = ConfigDict(extra="forbid")
    OMIT_IF_NONE: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: Any) -> Any:
        data = handler(self)
        for key in self.OMIT_IF_NONE:
            if key in data and data[key] is None:
                del data[key]
        return data


class Usage(ResponseBody):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ModelCard(ResponseBody):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "swiftbox"


class ListedModel(ModelCard):
    root: str
    parent: Optional[str] = None        # the base model, for an adapter


class ModelList(ResponseBody):
    object: Literal["list"] = "list"
    data: list[ListedModel]


class Health(ResponseBody):
    status: Literal["ok", "unhealthy"]
    engine: str


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> Usage:
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                 total_tokens=prompt_tokens + completion_tokens)


Hint = Optional[str]                       # an id / tag the API makes a hint (fields.py): typed, bounded, unused
Tags = Optional[dict[str, Annotated[str, Field(max_length=512)]]]


class ApiFields(BaseModel):
    """A Messages / Responses body. Which top-level fields each engine honours, refuses or takes as a hint is
    fields.py's table (the route screens the body as sent); here every field's type is checked, the hints' too."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

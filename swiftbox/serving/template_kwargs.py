"""What a client may pass to the chat template: `chat_template_kwargs` against an allow-list, and its own template.

vLLM hands `chat_template_kwargs` to the template as they come, so a client could overwrite what the server
renders with (`messages`, `tools`, `add_generation_prompt`), change what rendering returns (`tokenize`,
`return_dict`), slip in tools past the tool checks (Llama's `custom_tools`, SmolLM3's `xml_tools`) or hand the
template any object. swiftbox takes only the switches the preset families' templates read (tests/fixtures/templates),
each with its type; anything else is a 400 naming the key (`chat_template_kwargs.KEY`), never a 500.

A client's own template (`chat_template`, at the top level as vLLM takes it or inside `chat_template_kwargs`) is code
the server runs: refused (400 `chat_template_not_allowed`) unless the server was started with
--trust-request-chat-template (vLLM's flag of the same name). Even then its output is capped while it renders
(builtin/backend.py, compat.chat_template_output_capped).
"""
from __future__ import annotations

from typing import Any, Optional

from swiftbox.serving.errors import ApiError
from swiftbox.template_switches import SWITCHES, Check, fault, text

MAX_TEMPLATE_CHARS = 256 * 1024


# the switches themselves live with the step contract (swiftbox/template_switches.py): training takes the same ones
ALLOWED: dict[str, Check] = {**SWITCHES, "chat_template": text(MAX_TEMPLATE_CHARS)}   # the client's own template:
# only on a trusting server


def _refuse(key: str, why: str) -> ApiError:
    return ApiError(400, f"chat_template_kwargs.{key}: {why}", param=f"chat_template_kwargs.{key}",
                    code="invalid_chat_template_kwargs")


def check_kwargs(value: Any) -> Optional[dict[str, Any]]:
    """`chat_template_kwargs` as sent, checked against ALLOWED (ApiError 400 naming the first key at fault)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ApiError(400, "chat_template_kwargs: expected an object of template switches",
                       param="chat_template_kwargs", code="invalid_chat_template_kwargs")
    bad = fault(value, ALLOWED)
    if bad is not None:
        raise _refuse(*bad)
    return value


def client_template(chat_template: Optional[str], kwargs: Optional[dict[str, Any]]) -> Optional[str]:
    """The client's own template, from the top level or chat_template_kwargs (None: the model's own)."""
    return chat_template if chat_template is not None else (kwargs or {}).get("chat_template")


def check_trusted(chat_template: Optional[str], kwargs: Optional[dict[str, Any]], trusted: bool) -> None:
    """400 when the request brings its own template and the server does not run client templates."""
    if trusted or client_template(chat_template, kwargs) is None:
        return
    param = "chat_template" if chat_template is not None else "chat_template_kwargs.chat_template"
    raise ApiError(400, f"{param}: this server renders prompts with the model's own chat template only; a request "
                        "template is code the server would run (start the server with --trust-request-chat-template "
                        "to allow it for clients you trust)", param=param, code="chat_template_not_allowed")

"""The serving spec: every request parameter the official SDKs declare, per endpoint, and what each engine does with it.

FOR OTHER HELPERS (structured outputs, completions): this table is the one source of truth. To flip a field once
your implementation lands, edit its row below: e.g. `"response_format": row(HONOURED, HONOURED, "...")` in CHAT (and
`logit_bias`; Responses `text`; Messages `output_config`), keeping the note saying what is honoured, then rerun
`python -m swiftbox.serving.fields docs/serving.md` (tests/unit/test_serve_fields.py checks the doc is current).
Statuses:

    honoured  the field changes the answer as the API documents (a test shows the effect)
    refused   a 400 in the API's error shape naming it (`param` set) when the client set it to anything but its
              no-op value (None, and the values in `noop`: `n: 1`, `logprobs: false`, `modalities: ["text"]`, ...)
    hint      accepted with no effect, where the API makes it a hint or a side channel (ids for abuse tracking,
              caching keys, metadata, service tiers): the answer would be the same without it

Two tables per endpoint: SDK (the parameters of the SDK's request TypedDict, walked by the test, so a field a new SDK
adds fails CI until it is classified here) and EXTRAS (fields outside the SDK's types that swiftbox knows: vLLM's
sampling extras, fields older SDKs send). Any other top-level field is ignored and logged once per field name.

    screen(api, body, engine)   the refusals of this engine, in a route before the engine sees the request
    render_markdown()           the tables as docs/serving.md shows them (python -m swiftbox.serving.fields FILE)

The shape of each value (types, bounds) is checked by the request models in each family's protocol.py; the
per-value rules of an honoured field (tool_choice 'required' on the built-in engine, text.format, truncation)
live with the code that honours it and say so in the note.
"""
from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass
from typing import Any

from swiftbox.serving.errors import ApiError

log = logging.getLogger("swiftbox.serve")

HONOURED, REFUSED, HINT = "honoured", "refused", "hint"
ENGINES = ("builtin", "vllm")
APIS = ("chat", "completions", "responses", "messages")
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}
# where each endpoint's SDK request type lives (module, TypedDict): the Streaming variant carries `stream` too
SDK_TYPES = {
    "chat": ("openai.types.chat.completion_create_params", "CompletionCreateParamsStreaming"),
    "completions": ("openai.types.completion_create_params", "CompletionCreateParamsStreaming"),
    "responses": ("openai.types.responses.response_create_params", "ResponseCreateParamsStreaming"),
    "messages": ("anthropic.types.message_create_params", "MessageCreateParamsStreaming"),
}


@dataclass(frozen=True)
class Row:
    builtin: str
    vllm: str
    note: str
    noop: tuple[Any, ...] = ()       # values that mean "not set" (None always does)

    def status(self, engine: str) -> str:
        return self.vllm if engine == "vllm" else self.builtin

    def is_noop(self, value: Any) -> bool:
        return value is None or any(type(value) is type(n) and value == n for n in self.noop)


def row(builtin: str, vllm: str, note: str, *noop: Any) -> Row:
    return Row(builtin, vllm, note, noop)


def both(status: str, note: str, *noop: Any) -> Row:
    return Row(status, status, note, noop)


CACHE = "a caching hint: the answer is the same without it"
ABUSE = "an id for the provider's abuse tracking: nothing to track on a self-hosted server"
TIER = "one tier here: every request is served the same way"
HOSTED = "runs on OpenAI's servers (a local model cannot)"

CHAT: dict[str, Row] = {
    "messages": both(HONOURED, "rendered with the model's chat template (text content parts only)"),
    "model": both(HONOURED, "the base model or a served adapter; 404 for any other name"),
    "audio": both(REFUSED, "audio output is not served (text only)"),
    "frequency_penalty": both(HONOURED, "penalises tokens by how often they appeared"),
    "function_call": both(REFUSED, "the deprecated functions API is not served: use tools / tool_choice",
                          "none", "auto"),
    "functions": both(REFUSED, "the deprecated functions API is not served: use tools", []),
    "logit_bias": both(HONOURED, "token id -> bias in [-100, 100] added to its score (-100 bans, +100 forces); an "
                              "id outside the vocabulary is a 400", {}),
    "logprobs": both(HONOURED, "the chosen tokens' log-probabilities", False),
    "max_completion_tokens": both(HONOURED, "caps the answer (wins over max_tokens)"),
    "max_tokens": both(HONOURED, "caps the answer"),
    "metadata": both(HINT, "tags for OpenAI's stored completions; nothing is stored here"),
    "modalities": both(REFUSED, "only text output is served", ["text"]),
    "moderation": both(REFUSED, "no moderation model runs here"),
    "n": both(HONOURED, "n answers per request (at most 8)"),
    "parallel_tool_calls": both(HONOURED, "false: only the answer's first tool call is kept (as vLLM keeps it)"),
    "prediction": both(HINT, "predicted outputs only make OpenAI faster; the answer is the same without them"),
    "presence_penalty": both(HONOURED, "penalises tokens that appeared at all"),
    "prompt_cache_key": both(HINT, CACHE),
    "prompt_cache_options": both(HINT, CACHE),
    "prompt_cache_retention": both(HINT, CACHE),
    "reasoning_effort": row(HONOURED, HONOURED, "builtin: 'none'/'minimal' render the template with "
                            "enable_thinking false, other efforts with it true (templates that think); vLLM passes "
                            "it to the template"),
    "response_format": both(HONOURED, "json_schema (strict or not) and json_object, held by a grammar (builtin: "
                                   "llguidance; vLLM: its structured outputs); a schema that cannot compile is a 400; "
                                   "builtin: not with tools offered", {"type": "text"}),
    "safety_identifier": both(HINT, ABUSE),
    "seed": both(HONOURED, "the same seed and settings give the same answer"),
    "service_tier": both(HINT, TIER),
    "stop": both(HONOURED, "up to 4 stop strings; the answer ends before the first one"),
    "store": both(HINT, "OpenAI's dashboard copy has no counterpart here (GET /v1/chat/completions/{id} is not "
                        "served); the answer is the same"),
    "stream": both(HONOURED, "server-sent events, ending with data: [DONE]"),
    "stream_options": both(HONOURED, "include_usage: a last chunk with the usage"),
    "temperature": both(HONOURED, "0 is greedy"),
    "tool_choice": row(HONOURED, HONOURED, "builtin: 'auto' and 'none' (a 400 for 'required' or a named "
                       "function: use vLLM); vLLM: all"),
    "tools": both(HONOURED, "function tools, offered through the chat template; calls parsed from the answer"),
    "top_logprobs": both(HONOURED, "the k most likely tokens at each step (needs logprobs: true)", 0),
    "top_p": both(HONOURED, "nucleus sampling"),
    "user": both(HINT, ABUSE),
    "verbosity": both(REFUSED, "answer length is the model's own; steer it with max_tokens or the prompt",
                      "medium"),
    "web_search_options": both(REFUSED, f"web search {HOSTED}"),
}

VLLM_SAMPLING = {
    "top_k": both(HONOURED, "vLLM's extra: sample from the k most likely tokens (-1: all)", -1),
    "repetition_penalty": both(HONOURED, "vLLM's extra: > 1 discourages repeats", 1.0),
    "return_tokens_as_token_ids": both(HONOURED, "vLLM's extra: logprob tokens as 'token_id:N'", False),
    "structured_outputs": row(REFUSED, HONOURED, "vLLM's extra (json, regex, choice, grammar, structural_tag): "
                              "vLLM's own structured outputs; on the built-in engine send response_format"),
}

CHAT_EXTRAS: dict[str, Row] = {
    **VLLM_SAMPLING,
    "chat_template_kwargs": both(HONOURED, "vLLM's extra: template variables (an allow-list, e.g. enable_thinking)"),
    "chat_template": both(HONOURED, "vLLM's extra: the client's own template (needs "
                                    "--trust-request-chat-template)"),
    "continue_final_message": both(HONOURED, "vLLM's extra: the prompt ends inside the last assistant message, "
                                             "which the answer continues (needs add_generation_prompt: false)",
                                   False),
    "add_generation_prompt": both(HONOURED, "vLLM's extra: false leaves the assistant's header out", True),
}

COMPLETIONS: dict[str, Row] = {
    "model": both(HONOURED, "the base model or a served adapter"),
    "prompt": both(HONOURED, "a string, a list of strings, token ids or token-id lists (a list is a batch)"),
    "best_of": both(REFUSED, "best_of is not served (vLLM's V1 engine dropped it too): ask for n answers", 1),
    "echo": both(HONOURED, "the prompt before the answer; with logprobs, the prompt's own log-probabilities"),
    "frequency_penalty": both(HONOURED, "penalises tokens by how often they appeared"),
    "logit_bias": both(HONOURED, "token id -> bias in [-100, 100] added to its score (-100 bans, +100 forces); an "
                              "id outside the vocabulary is a 400", {}),
    "logprobs": both(HONOURED, "the chosen tokens' log-probabilities and the k most likely"),
    "max_tokens": both(HONOURED, "caps the answer (default 16; 0 with echo scores the prompt only)"),
    "n": both(HONOURED, "n answers per request (at most 8)"),
    "presence_penalty": both(HONOURED, "penalises tokens that appeared at all"),
    "seed": both(HONOURED, "the same seed and settings give the same answer"),
    "stop": both(HONOURED, "up to 4 stop strings"),
    "stream": both(HONOURED, "server-sent events, ending with data: [DONE]"),
    "stream_options": both(HONOURED, "include_usage: a last chunk with the usage"),
    "suffix": row(REFUSED, HONOURED, "insertion (text after the answer): vLLM renders it for fill-in-the-middle "
                  "models (others: vLLM's own 400); not served by the built-in engine", ""),
    "temperature": both(HONOURED, "0 is greedy"),
    "top_p": both(HONOURED, "nucleus sampling"),
    "user": both(HINT, ABUSE),
}

COMPLETIONS_EXTRAS: dict[str, Row] = {
    **VLLM_SAMPLING,
    "response_format": row(REFUSED, HONOURED, "vLLM's extra on completions (structured output of a plain "
                           "completion); on the built-in engine use chat's response_format", {"type": "text"}),
}

NATIVE = "vLLM answers this API itself; "

RESPONSES: dict[str, Row] = {
    "model": both(HONOURED, "the base model or a served adapter"),
    "input": both(HONOURED, "a string or message / function_call / function_call_output / reasoning items"),
    "instructions": both(HONOURED, "a system message for this response only (not carried to follow-ups)"),
    "access_programs": both(REFUSED, "OpenAI's access programs do not exist here"),
    "background": both(REFUSED, "background responses are not served", False),
    "background_options": both(REFUSED, "background responses are not served"),
    "context_management": both(REFUSED, "server-side compaction is not served", []),
    "conversation": both(REFUSED, "the Conversations API is not served: use previous_response_id"),
    "image": both(REFUSED, "image inputs are not served"),
    "include": row(HONOURED, HONOURED, "only 'reasoning.encrypted_content' (accepted: nothing is encrypted); "
                   "any other value is a 400", []),
    "max_output_tokens": both(HONOURED, "caps the answer (status incomplete when reached)"),
    "max_tool_calls": both(HINT, f"limits calls to hosted tools, which {HOSTED.split(' (')[0]}: none run here"),
    "metadata": row(HONOURED, HONOURED, "stored with the response and echoed in the Response object"),
    "moderation": both(REFUSED, "no moderation model runs here"),
    "parallel_tool_calls": both(HONOURED, "false: only the answer's first tool call is kept (as vLLM keeps it)"),
    "previous_response_id": row(HONOURED, REFUSED, "builtin: the stored conversation continues (404 when "
                                f"unknown or evicted); {NATIVE}it keeps no responses unless started with "
                                "VLLM_ENABLE_RESPONSES_API_STORE=1 (an unbounded store swiftbox does not turn on): "
                                "send the conversation as input"),
    "prompt": both(REFUSED, "stored prompt templates are not served: send input / instructions"),
    "prompt_cache_key": both(HINT, CACHE),
    "prompt_cache_options": both(HINT, CACHE),
    "prompt_cache_retention": both(HINT, CACHE),
    "reasoning": row(HONOURED, HONOURED, "effort 'none'/'minimal' render the template with enable_thinking "
                     "false; summary: a hint (reasoning comes back as a summary item when the model thinks)"),
    "safety_identifier": both(HINT, ABUSE),
    "service_tier": both(HINT, TIER),
    "store": row(HONOURED, HINT, "builtin: kept for previous_response_id, GET, DELETE and input_items "
                 f"(false: not kept); {NATIVE}without its store it keeps nothing, whatever store says"),
    "stream": both(HONOURED, "typed server-sent events with sequence numbers"),
    "stream_options": both(HINT, "include_obfuscation pads events against side channels; nothing to pad here"),
    "temperature": both(HONOURED, "0 is greedy"),
    "text": both(HONOURED, "format: text, json_object or json_schema (structured output, as chat's "
                 "response_format); verbosity: a hint"),
    "tool_choice": row(HONOURED, HONOURED, "builtin: 'auto' and 'none' (a 400 for 'required' or a named "
                       "function: use vLLM); a hosted tool is a 400"),
    "tools": both(HONOURED, "function and namespace tools; hosted tools (web_search, ...) listed but not offered"),
    "top_logprobs": both(REFUSED, "output logprobs are not served on /v1/responses (use chat completions)", 0),
    "top_p": both(HONOURED, "nucleus sampling"),
    "truncation": both(HONOURED, "'disabled' only: a prompt past the context is a 400 ('auto' is refused)"),
    "user": both(HINT, ABUSE),
}

RESPONSES_EXTRAS: dict[str, Row] = {
    "client_metadata": both(HINT, "Codex's session ids: nothing to do with the answer"),
}

MESSAGES: dict[str, Row] = {
    "model": both(HONOURED, "the base model or a served adapter"),
    "messages": both(HONOURED, "text, tool_use, tool_result and thinking blocks; a last assistant turn is "
                               "continued (prefill; vLLM's own /v1/messages does not continue it: a 400 there)"),
    "max_tokens": both(HONOURED, "caps the answer (stop_reason max_tokens)"),
    "cache_control": both(HINT, CACHE),
    "container": both(REFUSED, "code-execution containers are not served"),
    "diagnostics": both(HINT, "Anthropic's request tracing: nothing to trace here"),
    "inference_geo": both(HINT, "one place here: the machine the server runs on"),
    "metadata": both(HINT, "user_id for the provider's abuse tracking"),
    "output_config": both(HONOURED, "effort is a hint; format {type: json_schema, schema} is a structured output "
                                 "(as chat's response_format)"),
    "service_tier": both(HINT, TIER),
    "speed": both(HINT, TIER),
    "stop_sequences": both(HONOURED, "up to 4; the answer ends before the first one, stop_reason stop_sequence "
                                     "names it"),
    "stream": both(HONOURED, "Anthropic's typed events (message_start ... message_stop)"),
    "system": both(HONOURED, "the leading system message"),
    "thinking": both(HONOURED, "enabled / adaptive render the template with enable_thinking, disabled without; "
                               "budget_tokens is a hint"),
    "tool_choice": row(HONOURED, HONOURED, "builtin: auto and none (a 400 for any / tool: use vLLM); "
                       "disable_parallel_tool_use keeps only the first tool call"),
    "tools": both(HONOURED, "custom tools with input_schema; server tools are a 400"),
    "user_profile_id": both(HINT, ABUSE),
    "workspace_id": both(HINT, "Anthropic's workspaces do not exist here"),
}

MESSAGES_EXTRAS: dict[str, Row] = {    # in Anthropic's API (beta, or no longer in anthropic>=2's request types)
    "context_management": both(HONOURED, "beta; only edits that keep everything (clear_thinking with keep: all, "
                                         "what Claude Code sends); any other edit is a 400"),
    "temperature": both(HONOURED, "0 is greedy (at most 1)"),
    "top_p": both(HONOURED, "nucleus sampling"),
    "top_k": both(HONOURED, "sample from the k most likely tokens", -1),
}

SDK: dict[str, dict[str, Row]] = {"chat": CHAT, "completions": COMPLETIONS, "responses": RESPONSES,
                                  "messages": MESSAGES}
EXTRAS: dict[str, dict[str, Row]] = {"chat": CHAT_EXTRAS, "completions": COMPLETIONS_EXTRAS,
                                     "responses": RESPONSES_EXTRAS, "messages": MESSAGES_EXTRAS}

_logged: set[tuple[str, str]] = set()
_lock = threading.Lock()
MAX_LOGGED = 1024        # distinct unknown names remembered; past it clients' made-up names are no longer logged


def lookup(api: str, name: str) -> Row | None:
    return SDK[api].get(name) or EXTRAS[api].get(name)


def screen(api: str, body: Any, engine: str) -> None:
    """Refuse (400, `param` naming it) each field this engine does not implement that the client set to anything
    but its no-op value; log each unknown field once per name."""
    if not isinstance(body, dict):
        return
    for name, value in body.items():
        found = lookup(api, str(name))
        if found is None:
            ignored(api, str(name))
        elif found.status(engine) == REFUSED and not found.is_noop(value):
            raise ApiError(400, f"{name}: not supported by swiftbox's {engine} engine: {found.note}",
                           param=str(name), code="unsupported_field")


def ignored(api: str, name: str) -> None:
    """Log an unknown field the first time it is seen on this endpoint (not per request)."""
    with _lock:
        if (api, name) in _logged or len(_logged) > MAX_LOGGED:
            return
        _logged.add((api, name))
        if len(_logged) > MAX_LOGGED:
            log.warning("%d unknown field names logged; further ones are ignored without a word", MAX_LOGGED)
            return
    log.warning("%s: ignoring the unknown field %r (not in the SDK's request type or swiftbox's known extras; "
                "logged once)", PATHS[api], name[:100])


def render_markdown() -> str:
    """The tables for docs/serving.md, one per endpoint: field, the two engines' status, the note."""
    out: list[str] = []
    for api in APIS:
        out += [f"#### `POST {PATHS[api]}`", "", "| field | builtin | vllm | note |", "|---|---|---|---|"]
        for extra, rows in ((False, SDK[api]), (True, EXTRAS[api])):
            for name in sorted(rows):
                r = rows[name]
                shown = f"`{name}`" + (" (extra)" if extra else "")
                out.append(f"| {shown} | {r.builtin} | {r.vllm} | {r.note.replace('|', '/')} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


BEGIN, END = "<!-- fields:begin (generated: python -m swiftbox.serving.fields docs/serving.md) -->", \
    "<!-- fields:end -->"


def with_tables(doc: str) -> str:
    """`doc` with the text between BEGIN and END replaced by render_markdown()."""
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{render_markdown()}{END}{tail}"


if __name__ == "__main__":      # python -m swiftbox.serving.fields docs/serving.md: regenerate the tables
    from pathlib import Path

    path = Path(sys.argv[1])
    path.write_text(with_tables(path.read_text()))

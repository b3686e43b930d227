"""Anthropic Messages and OpenAI Responses onto the one chat path: each request becomes the ChatCompletionRequest
the chat route would have received (so prompts, tool parsing, adapters, limits and isolation are the chat route's),
and the chat answer (JSON, or its SSE chunks) is read back as engine-neutral pieces that responses.py shapes into
the endpoint's body or events.

    to_chat(MessagesRequest)                       -> ChatCompletionRequest
    responses_to_chat(ResponsesRequest, history)   -> (ChatCompletionRequest, the conversation as chat messages)
    whole(response)                                -> (Output, Usage) of a JSON chat answer
    pieces(response)                               -> async ("reasoning"|"text"|"tool"|"args"|"finish"|"usage"|
                                                       "error", value) from an SSE chat answer

A block or item this server cannot honour is a 400 naming where it is (messages.2.content.0.type: ...).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, AsyncIterator, Optional

from swiftbox.serving.errors import ApiError
from swiftbox.serving.protocol import ChatCompletionRequest, anthropic_format, responses_format, usage
from swiftbox.serving.responses import Output, uid

if TYPE_CHECKING:
    from starlette.responses import Response

    from swiftbox.serving.protocol import MessagesRequest, ResponsesRequest, Usage


def refuse(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param, code="unsupported_field")


def _text_blocks(blocks: Any, param: str) -> str:
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


def _json_args(value: Any, param: str) -> str:
    if isinstance(value, str):
        return value or "{}"
    if value is None:
        return "{}"
    if not isinstance(value, dict):
        raise refused_type(param, "an object")
    return json.dumps(value, ensure_ascii=False)


# -- Anthropic Messages -> chat -----------------------------------------------------------------------------

def to_chat(req: MessagesRequest, *, stream: Optional[bool] = None) -> ChatCompletionRequest:
    messages: list[dict[str, Any]] = []
    system = [_text_blocks(req.system, "system")] if req.system else []
    for i, m in enumerate(req.messages):
        role, content = m.get("role"), m.get("content")
        if role == "system":        # Claude Code 2.1.154+ sends some (agent lists, reminders) inside `messages`
            system.append(_text_blocks(content, f"messages.{i}.content"))
            continue
        if role not in ("user", "assistant"):
            raise refused_type(f"messages.{i}.role", "'user', 'assistant' or 'system'")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise refused_type(f"messages.{i}.content", "a string or a list of content blocks")
        texts, calls, results, reasoning = [], [], [], []
        for k, block in enumerate(content):
            param = f"messages.{i}.content.{k}"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use" and role == "assistant" and isinstance(block.get("name"), str):
                calls.append({"id": str(block.get("id") or f"toolu_{i}_{k}"), "type": "function",
                              "function": {"name": block["name"],
                                           "arguments": _json_args(block.get("input"), f"{param}.input")}})
            elif kind == "tool_result" and role == "user":
                result = block.get("content")
                text = "" if result is None else _text_blocks(result, f"{param}.content")
                if block.get("is_error"):
                    text = f"Error: {text}"
                results.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id") or ""), "content": text})
            elif kind == "thinking" and role == "assistant" and isinstance(block.get("thinking"), str):
                reasoning.append(block["thinking"])
            elif kind == "redacted_thinking" and role == "assistant":
                continue      # encrypted by another server: nothing this model can read
            else:
                raise refuse(f"{param}.type", f"a '{kind}' block is not supported in a {role} message "
                                              "(text, tool_use, tool_result, thinking)")
        messages.extend(results)
        if texts or calls or reasoning or not results:
            msg: dict[str, Any] = {"role": role, "content": "".join(texts)}
            if calls:
                msg["tool_calls"] = calls
            if reasoning:
                msg["reasoning_content"] = "".join(reasoning)
            messages.append(msg)
    if any(system):     # one leading system message: most chat templates take no other
        messages.insert(0, {"role": "system", "content": "\n\n".join(t for t in system if t)})
    last = messages[-1] if messages else {}
    prefill = last.get("role") == "assistant" and bool(last.get("content")) and not last.get("tool_calls")
    body: dict[str, Any] = {
        "model": req.model, "messages": messages, "max_tokens": req.max_tokens, "temperature": req.temperature,
        "top_p": req.top_p, "top_k": req.top_k, "stop": req.stop_sequences or None,
        "stream": req.stream if stream is None else stream,
        "stream_options": {"include_usage": True}}
    if prefill:         # a last assistant turn is continued, not answered (the documented way to steer the reply)
        body.update(continue_final_message=True, add_generation_prompt=False)
    if req.tools:
        body["tools"] = [_anthropic_tool(t, f"tools.{k}") for k, t in enumerate(req.tools)]
    if req.tool_choice is not None:
        body["tool_choice"] = _anthropic_choice(req.tool_choice)
        if req.tool_choice.get("disable_parallel_tool_use") is True:
            body["parallel_tool_calls"] = False
    if req.thinking is not None:
        kind = req.thinking.get("type")
        if kind not in ("enabled", "disabled", "adaptive"):
            raise refused_type("thinking.type", "'enabled', 'disabled' or 'adaptive'")
        body["chat_template_kwargs"] = {"enable_thinking": kind != "disabled"}
    return _formatted(body, anthropic_format((req.output_config or {}).get("format")), "output_config.format")


def _anthropic_tool(tool: dict[str, Any], param: str) -> dict[str, Any]:
    if tool.get("type") not in (None, "custom"):
        raise refuse(f"{param}.type", f"server tool '{tool.get('type')}' is not supported (custom tools with "
                                      "input_schema only)")
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise refused_type(f"{param}.name", "a non-empty string")
    schema = tool.get("input_schema", {"type": "object"})
    if not isinstance(schema, dict):
        raise refused_type(f"{param}.input_schema", "an object")
    fn = {"name": tool["name"], "parameters": schema}
    if isinstance(tool.get("description"), str):
        fn["description"] = tool["description"]
    return {"type": "function", "function": fn}


def _anthropic_choice(choice: dict[str, Any]) -> Any:
    kind = choice.get("type")
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise refused_type("tool_choice.name", "a tool name")
        return {"type": "function", "function": {"name": choice["name"]}}
    mapped = {"auto": "auto", "any": "required", "none": "none"}.get(str(kind))
    if mapped is None:
        raise refused_type("tool_choice.type", "'auto', 'any', 'tool' or 'none'")
    return mapped


def _formatted(body: dict[str, Any], fmt: Optional[dict[str, Any]], param: str) -> ChatCompletionRequest:
    """The chat request with a structured output (`fmt`: chat's response_format) that came from field `param` (the
    name a schema the engine cannot compile is refused under)."""
    if fmt is not None:
        body["response_format"] = fmt
    chat = _chat(body)
    chat._format_param = param
    return chat


def _chat(body: dict[str, Any]) -> ChatCompletionRequest:
    from pydantic import ValidationError

    from swiftbox.serving.errors import from_validation

    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        err = from_validation([dict(e) for e in exc.errors()])
        raise ApiError(400, err.message, param=err.param, code="invalid_value") from None


# -- OpenAI Responses -> chat -------------------------------------------------------------------------------

def responses_to_chat(req: ResponsesRequest, history: list[dict[str, Any]]) -> tuple[
        ChatCompletionRequest, list[dict[str, Any]], dict[str, tuple[str, str]]]:
    """The chat request, the conversation it carries (history + this input, without instructions: the store
    keeps that, since `instructions` do not carry over to a follow-up response), and the flat names of
    namespaced functions ({flat: (namespace, name)}, see responses_tools)."""
    convo = list(history)
    items = [{"role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    reasoning: list[str] = []
    for i, item in enumerate(items):
        param = f"input.{i}"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise refused_type(f"{param}.role", "'user', 'assistant', 'system' or 'developer'")
            msg = {"role": "system" if role == "developer" else role,
                   "content": _text_blocks(item.get("content", ""), f"{param}.content")}
            if role == "assistant" and reasoning:
                msg["reasoning_content"], reasoning = "".join(reasoning), []
            convo.append(msg)
        elif kind == "function_call":
            if not isinstance(item.get("name"), str):
                raise refused_type(f"{param}.name", "a function name")
            name = item["name"]
            if isinstance(item.get("namespace"), str) and item["namespace"]:
                name = flat_name(item["namespace"], name)
            call = {"id": str(item.get("call_id") or item.get("id") or f"call_{i}"), "type": "function",
                    "function": {"name": name, "arguments": _json_args(item.get("arguments"),
                                                                               f"{param}.arguments")}}
            last = convo[-1] if convo else None
            if last and last["role"] == "assistant" and not last.get("content") and last.get("tool_calls"):
                last["tool_calls"].append(call)       # parallel calls of one turn stay one assistant message
            else:
                msg = {"role": "assistant", "content": "", "tool_calls": [call]}
                if reasoning:
                    msg["reasoning_content"], reasoning = "".join(reasoning), []
                convo.append(msg)
        elif kind == "function_call_output":
            out = item.get("output", "")
            convo.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""),
                          "content": _text_blocks(out, f"{param}.output")})
        elif kind == "reasoning":
            summary = item.get("summary") or []
            if not isinstance(summary, list):
                raise refused_type(f"{param}.summary", "a list of summary_text parts")
            for j, part in enumerate(summary):
                text = part.get("text", "") if isinstance(part, dict) else None
                if not isinstance(text, str):
                    raise refused_type(f"{param}.summary.{j}", "{type: summary_text, text: string}")
                reasoning.append(text)
        else:
            raise refuse(f"{param}.type", f"'{kind}' input items are not supported (message, function_call, "
                                          "function_call_output, reasoning)")
    messages = ([{"role": "system", "content": req.instructions}] if req.instructions else []) + convo
    if not messages:
        raise refused_type("input", "at least one message")
    body: dict[str, Any] = {"model": req.model, "messages": messages, "max_tokens": req.max_output_tokens,
                            "temperature": req.temperature, "top_p": req.top_p, "stream": req.stream,
                            "stream_options": {"include_usage": True}}
    tools, names = responses_tools(req.tools or [])
    if tools:
        body["tools"] = tools
    if req.tool_choice is not None:
        body["tool_choice"] = _responses_choice(req.tool_choice, bool(tools))
    if req.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = req.parallel_tool_calls
    if req.reasoning is not None:
        effort = req.reasoning.get("effort")
        if effort not in (None, "none", "minimal", "low", "medium", "high", "xhigh"):
            raise refused_type("reasoning.effort", "none, minimal, low, medium or high")
        body["chat_template_kwargs"] = {"enable_thinking": effort not in ("none", "minimal")}
    return _formatted(body, responses_format((req.text or {}).get("format")), "text.format"), convo, names


# Hosted tools: the OpenAI server runs them, so a local model cannot. A request may list them (Codex always sends
# `web_search`); they are not offered to the model, and a tool_choice that requires one is a 400.
HOSTED_TOOLS = frozenset({"web_search", "web_search_preview", "web_search_preview_2025_03_11", "file_search",
                          "code_interpreter", "image_generation", "computer_use_preview", "computer_use", "mcp",
                          "local_shell", "shell", "apply_patch", "tool_search"})


def flat_name(namespace: str, name: str) -> str:
    """The one function name a namespaced tool is offered under (Codex's own flat form: `ns__name`)."""
    return f"{namespace.rstrip('_')}__{name.lstrip('_')}"


def responses_tools(tools: list[Any]) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]]]:
    """The chat tools a Responses `tools` list offers the model, and {flat name: (namespace, name)} for the
    functions of `namespace` tools (so a call to a flat name goes back as {name, namespace})."""
    out: list[dict[str, Any]] = []
    names: dict[str, tuple[str, str]] = {}
    for k, tool in enumerate(tools):
        param = f"tools.{k}"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(kind, str):
            raise refused_type(f"{param}.type", "a tool type string (function, namespace, or a hosted tool)")
        if kind == "function":
            out.append(_responses_tool(tool, param))
        elif kind == "namespace":
            space = tool.get("name")
            if not isinstance(space, str) or not space:
                raise refused_type(f"{param}.name", "a non-empty string")
            inner = tool.get("tools")
            if not isinstance(inner, list):
                raise refused_type(f"{param}.tools", "a list of function tools")
            for j, fn in enumerate(inner):
                sub = f"{param}.tools.{j}"
                if not isinstance(fn, dict) or fn.get("type", "function") != "function":
                    raise refuse(f"{sub}.type", "a namespace holds function tools only")
                chat_tool = _responses_tool({**fn, "type": "function"}, sub)
                flat = flat_name(space, chat_tool["function"]["name"])
                names[flat] = (space, chat_tool["function"]["name"])
                chat_tool["function"]["name"] = flat
                out.append(chat_tool)
        elif kind in HOSTED_TOOLS:
            continue                  # not offered: this server cannot run it (docs/serving.md)
        else:
            raise refuse(f"{param}.type", f"'{kind}' tools are not supported (function and namespace tools; "
                                          "hosted tools such as web_search are accepted and not offered)")
    seen: set[str] = set()
    for t in out:
        name = t["function"]["name"]
        if name in seen:
            raise ApiError(400, f"tools: the function name '{name}' is offered twice (a namespaced function is "
                                "offered as namespace__name)", param="tools", code="invalid_value")
        seen.add(name)
    return out, names


def _responses_choice(choice: Any, offered: bool) -> Any:
    if isinstance(choice, dict):
        kind = choice.get("type")
        if not isinstance(kind, str):
            raise refused_type("tool_choice.type", "a string")
        if kind in HOSTED_TOOLS:
            raise refuse("tool_choice.type", f"hosted tool '{kind}' is not offered by this server (a local model "
                                             "cannot run it)")
        if kind != "function" or not isinstance(choice.get("name"), str):
            raise refused_type("tool_choice", "'auto', 'none', 'required' or {type: function, name}")
        name = choice["name"]
        if isinstance(choice.get("namespace"), str):
            name = flat_name(choice["namespace"], name)
        return {"type": "function", "function": {"name": name}}
    if choice == "required" and not offered:
        raise refuse("tool_choice", "'required' but no function tool is offered (hosted tools are not)")
    return choice


def _responses_tool(tool: dict[str, Any], param: str) -> dict[str, Any]:
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise refused_type(f"{param}.name", "a non-empty string")
    schema = tool.get("parameters") or {"type": "object"}
    if not isinstance(schema, dict):
        raise refused_type(f"{param}.parameters", "a JSON schema object")
    fn = {"name": tool["name"], "parameters": schema}
    if isinstance(tool.get("description"), str):
        fn["description"] = tool["description"]
    return {"type": "function", "function": fn}


def input_items(given: Any) -> list[dict[str, Any]]:
    """A request's `input` as the items GET /v1/responses/{id}/input_items lists: a string becomes one user
    message, a message's string content one input_text part, and every item gets an id (its own when it had one)."""
    items: list[Any] = [{"type": "message", "role": "user", "content": given}] if isinstance(given, str) else given
    out: list[dict[str, Any]] = []
    for found in items:
        item: dict[str, Any] = dict(found)
        kind = item.setdefault("type", "message")
        if kind == "message":
            text_kind = "output_text" if item.get("role") == "assistant" else "input_text"
            if isinstance(item.get("content"), str):
                item["content"] = [{"type": text_kind, "text": item["content"]}]
            item.setdefault("status", "completed")
        prefix = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}
        item.setdefault("id", uid(prefix.get(str(kind), "item")))
        out.append(item)
    return out


def items_to_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's output items as the assistant turn a follow-up response continues from."""
    text = "".join(c.get("text", "") for i in items if i["type"] == "message" for c in i["content"])
    reasoning = "".join(s.get("text", "") for i in items if i["type"] == "reasoning" for s in i["summary"])
    calls = [{"id": i["call_id"], "type": "function",
              "function": {"name": flat_name(i["namespace"], i["name"]) if i.get("namespace") else i["name"],
                           "arguments": i["arguments"]}}
             for i in items if i["type"] == "function_call"]
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = calls
    if reasoning:
        msg["reasoning_content"] = reasoning
    return [msg]


# -- the chat answer, read back -----------------------------------------------------------------------------

def _error(status: int, data: Any) -> ApiError:
    err = data.get("error") if isinstance(data, dict) else None
    found = err if isinstance(err, dict) else {}
    kind = found.get("type") or ("invalid_request_error" if found else "server_error")
    return ApiError(status if 400 <= status < 500 else 503, str(found.get("message") or data)[:1000], type=kind)


def whole(response: Response) -> tuple[Output, Usage]:
    """The first choice and the usage of a JSON chat answer (an error answer raises it as ApiError)."""
    data = json.loads(bytes(response.body))
    if response.status_code != 200:
        raise _error(response.status_code, data)
    choice, u = data["choices"][0], data["usage"]
    msg = choice["message"]
    return (Output(0, msg.get("content"), choice.get("finish_reason"), msg.get("reasoning_content"),
                   list(msg.get("tool_calls") or []), stop_reason=choice.get("stop_reason")),
            usage(u["prompt_tokens"], u["completion_tokens"]))


async def pieces(response: Response) -> AsyncIterator[tuple[str, Any]]:
    """The pieces of a streamed chat answer, in order: ("reasoning", text), ("text", text), ("tool", {index, id,
    name}), ("args", (index, text)), ("stop_sequence", the stop string that ended it), ("finish", reason),
    ("usage", Usage), ("error", ApiError)."""
    iterator = response.body_iterator     # type: ignore[attr-defined]
    buffer = ""
    seen_tools: set[int] = set()
    try:
        async for chunk in iterator:
            buffer += chunk.decode() if isinstance(chunk, (bytes, bytearray)) else chunk
            while "\n\n" in buffer:
                event, buffer = buffer.split("\n\n", 1)
                data = "".join(line[5:].strip() for line in event.splitlines() if line.startswith("data:"))
                if not data or data == "[DONE]":
                    continue
                body = json.loads(data)
                if "error" in body:
                    yield "error", _error(400, body)
                    continue
                for choice in body.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("reasoning_content"):
                        yield "reasoning", delta["reasoning_content"]
                    if delta.get("content"):
                        yield "text", delta["content"]
                    for call in delta.get("tool_calls") or []:
                        index = call.get("index", 0)
                        fn = call.get("function") or {}
                        if index not in seen_tools:
                            seen_tools.add(index)
                            yield "tool", {"index": index, "id": call.get("id"), "name": fn.get("name")}
                        if fn.get("arguments"):
                            yield "args", (index, fn["arguments"])
                    if isinstance(choice.get("stop_reason"), str):
                        yield "stop_sequence", choice["stop_reason"]
                    if choice.get("finish_reason"):
                        yield "finish", choice["finish_reason"]
                if body.get("usage"):
                    u = body["usage"]
                    yield "usage", usage(u["prompt_tokens"], u["completion_tokens"])
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()      # the chat run's own finally: its sequences are cancelled, metrics observed

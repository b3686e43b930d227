"""OpenAI Responses onto the chat request, and back into the store's conversation:

    to_chat(ResponsesRequest, history)   -> (ChatCompletionRequest, the conversation as chat messages, flat names)
    responses_tools(tools)               -> the chat tools offered (namespaces flattened, hosted tools left out)
    input_items(input)                   -> the items GET /v1/responses/{id}/input_items lists
    items_to_messages(output items)      -> the assistant turn a follow-up response continues from
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swiftbox.serving.errors import ApiError
from swiftbox.serving.onto_chat import formatted, json_args, refuse, refused_type, text_blocks
from swiftbox.serving.render import uid
from swiftbox.serving.responses.protocol import responses_format

if TYPE_CHECKING:
    from swiftbox.serving.openai.protocol import ChatCompletionRequest
    from swiftbox.serving.responses.protocol import ResponsesRequest


def to_chat(req: ResponsesRequest, history: list[dict[str, Any]]) -> tuple[
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
                   "content": text_blocks(item.get("content", ""), f"{param}.content")}
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
                    "function": {"name": name, "arguments": json_args(item.get("arguments"),
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
                          "content": text_blocks(out, f"{param}.output")})
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
    return formatted(body, responses_format((req.text or {}).get("format")), "text.format"), convo, names


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

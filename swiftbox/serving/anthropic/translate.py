"""Anthropic Messages onto the chat request: `to_chat(MessagesRequest)` -> ChatCompletionRequest (system blocks,
tool_use / tool_result / thinking blocks, a prefill continued, tools and tool_choice, thinking, output_config)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from swiftbox.serving.anthropic.protocol import anthropic_format
from swiftbox.serving.onto_chat import formatted, json_args, refuse, refused_type, text_blocks

if TYPE_CHECKING:
    from swiftbox.serving.anthropic.protocol import MessagesRequest
    from swiftbox.serving.openai.protocol import ChatCompletionRequest


def to_chat(req: MessagesRequest, *, stream: Optional[bool] = None) -> ChatCompletionRequest:
    messages: list[dict[str, Any]] = []
    system = [text_blocks(req.system, "system")] if req.system else []
    for i, m in enumerate(req.messages):
        role, content = m.get("role"), m.get("content")
        if role == "system":        # Claude Code 2.1.154+ sends some (agent lists, reminders) inside `messages`
            system.append(text_blocks(content, f"messages.{i}.content"))
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
                                           "arguments": json_args(block.get("input"), f"{param}.input")}})
            elif kind == "tool_result" and role == "user":
                result = block.get("content")
                text = "" if result is None else text_blocks(result, f"{param}.content")
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
    return formatted(body, anthropic_format((req.output_config or {}).get("format")), "output_config.format")


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

"""What a chat template can print, probed once per template, and the rewrite of swiftbox's messages into that form.

swiftbox's messages are OpenAI-shaped: `content` text, `reasoning_content`, assistant `tool_calls`, `tool` turns,
`tools` schemas. Templates differ in what they print of that, so before rendering (for training and for the
server's prompts alike - both go through data.render):

- tool calls: a template that prints a call's arguments gets them natively. One that does not (Gemma 2/3, Phi-3.5,
  Phi-4, SmolLM3, InternLM2.5, Baichuan2, GLM-4 chat, DeepSeek-R1-Distill, ...) gets swiftbox's DEFAULT TOOL FORMAT,
  the Hermes convention (the one Qwen2.5, Nous-Hermes and ms-swift's `agent_template hermes` use; LLaMA-Factory's
  default tool formatter is the ReAct-style `Action:` / `Action Input:` instead):
    * the tool schemas, one JSON object a line inside `<tools></tools>`, with the call format, join the system
      prompt (or the first user turn when the template has no system role);
    * an assistant call is `<tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>` after the reply's text,
      one block per call, blocks separated by a newline;
    * tool results become one user turn of `<tool_response>\n...\n</tool_response>` blocks.
  The server parses that format back (serving/toolformats/, "hermes"), so a model trained with it calls tools
  through the API.
- reasoning: printed from the field the template reads - `reasoning_content`, or `reasoning` (Hunyuan 3, Kimi),
  or `thinking` (LFM2.5) - or from Mistral-style `thinking` content chunks
  (`[{"type": "thinking", "thinking": ...}, {"type": "text", "text": ...}]`) when only those are printed; else the
  template drops it (as it would at inference). swiftbox's messages hold it as `reasoning_content` (data.formats maps
  every input name there); the rename to the template's field happens here, at rendering.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Optional

PROBE_VALUE, PROBE_THOUGHT, PROBE_SYSTEM = "PROBEVALUE7Q", "PROBETHOUGHT7Q", "PROBESYSTEM7Q"
PROBE_TOOL = {"type": "function", "function": {"name": "probe_fn", "description": "probe", "parameters": {
    "type": "object", "properties": {"probe_arg": {"type": "string"}}, "required": ["probe_arg"]}}}
TOOLS_HEADER = ("# Tools\n\nYou may call functions to answer. Their signatures, one JSON object a line, are inside "
                "<tools></tools>:\n<tools>\n")
TOOLS_FOOTER = ("\n</tools>\n\nTo call a function, write a JSON object with its name and arguments inside "
                "<tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                "<args-json-object>}\n</tool_call>")


REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")   # the message fields templates print reasoning from


@dataclass(frozen=True)
class Dialect:
    tools: str = "native"        # native | default (swiftbox's default tool format)
    reasoning: str = "field"     # field (reasoning_key) | chunks (thinking content chunks) | none
    system: bool = True          # the template takes a system message
    reasoning_key: str = "reasoning_content"   # the message field the template prints reasoning from


def apply(tokenizer, messages: list[dict], tools: Optional[list], kwargs: dict) -> Any:
    """apply_chat_template, trying the shapes templates disagree on (arguments as object or JSON string,
    a call's content None or ""); the first error is raised when none renders."""
    if tools:
        kwargs = {**kwargs, "tools": tools}
    try:
        return tokenizer.apply_chat_template(messages, **kwargs)
    except Exception as first:  # noqa: BLE001 - the template's own refusal; callers turn it into a UserError
        if any(m.get("tool_calls") for m in messages):
            blank = [dict(m, content="") if m.get("content") is None else m for m in messages]
            for variant in (string_arguments(messages), blank, string_arguments(blank)):
                try:
                    return tokenizer.apply_chat_template(variant, **kwargs)
                except Exception:  # noqa: BLE001
                    continue
        raise first


def string_arguments(messages: list[dict]) -> list[dict]:
    out = copy.deepcopy(messages)
    for m in out:
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            if not isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.dumps(fn.get("arguments"), ensure_ascii=False)
    return out


def _prints(tokenizer, messages: list[dict], needle: str, tools: Optional[list] = None) -> bool:
    try:
        return needle in apply(tokenizer, messages, tools, {"tokenize": False})
    except Exception:  # noqa: BLE001 - a template that raises does not print it
        return False


def _prints_chunks(tokenizer, messages: list[dict]) -> bool:
    """The thinking chunk printed as reasoning, not the content list printed as a string (its repr)."""
    try:
        text = apply(tokenizer, messages, None, {"tokenize": False})
    except Exception:  # noqa: BLE001
        return False
    return PROBE_THOUGHT in text and "Answer." in text and "'type'" not in text and '"type"' not in text


_DIALECTS: dict = {}


def dialect(tokenizer) -> Dialect:
    """The template's dialect, probed once per tokenizer + template."""
    key = (id(tokenizer), getattr(tokenizer, "chat_template", None))
    if key not in _DIALECTS:
        from swiftbox.data.template_budget import TemplateOverBudget, budget, template_sources

        name = str(getattr(tokenizer, "name_or_path", "") or "the tokenizer")
        with budget(name, template_sources(tokenizer)) as clock:    # the probes run under the render budget too
            found = _probe(tokenizer)
        if clock.exceeded:               # a probe swallowed the stop: the template is over budget all the same
            raise TemplateOverBudget(name, clock.seconds)
        _DIALECTS[key] = found
    return _DIALECTS[key]


def _probe(tokenizer) -> Dialect:
    user = {"role": "user", "content": "Question?"}
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "a1b2c3d4e", "type": "function", "function": {
        "name": "probe_fn", "arguments": {"probe_arg": PROBE_VALUE}}}]}
    native = _prints(tokenizer, [user, call], PROBE_VALUE, [PROBE_TOOL])
    answer = {"role": "assistant", "content": "Answer."}
    reasoning, key = "none", REASONING_KEYS[0]
    for name in REASONING_KEYS:
        if _prints(tokenizer, [user, {**answer, name: PROBE_THOUGHT}], PROBE_THOUGHT):
            reasoning, key = "field", name
            break
    chunks = [{"type": "thinking", "thinking": PROBE_THOUGHT}, {"type": "text", "text": "Answer."}]
    if reasoning == "none" and _prints_chunks(tokenizer, [user, dict(answer, content=chunks)]):
        reasoning = "chunks"
    system = _prints(tokenizer, [{"role": "system", "content": PROBE_SYSTEM}, user], PROBE_SYSTEM)
    return Dialect("native" if native else "default", reasoning, system, key)


def uses_tools(messages: list[dict], tools: Optional[list]) -> bool:
    return bool(tools) or any(m.get("tool_calls") or m["role"] == "tool" for m in messages)


def adapt(tokenizer, messages: list[dict], tools: Optional[list]) -> tuple[list[dict], Optional[list]]:
    """`messages` and `tools` in the form this template prints (see the module docstring)."""
    d = dialect(tokenizer)
    if d.reasoning == "chunks" and any(m.get("reasoning_content") for m in messages):
        messages = [_as_chunks(m) if m["role"] == "assistant" and m.get("reasoning_content") else m for m in messages]
    elif d.reasoning == "field" and d.reasoning_key != "reasoning_content":
        messages = [_renamed(m, d.reasoning_key) if "reasoning_content" in m else m for m in messages]
    if d.tools == "default" and uses_tools(messages, tools):
        return default_tool_format(messages, tools, d.system), None
    return messages, tools


def _renamed(m: dict, key: str) -> dict:
    out = {k: v for k, v in m.items() if k != "reasoning_content"}
    out[key] = m["reasoning_content"]
    return out


def _as_chunks(m: dict) -> dict:
    out = {k: v for k, v in m.items() if k != "reasoning_content"}
    out["content"] = [{"type": "thinking", "thinking": m["reasoning_content"]},
                      {"type": "text", "text": m.get("content") or ""}]
    return out


def tools_text(tools: list) -> str:
    return TOOLS_HEADER + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools) + TOOLS_FOOTER


def call_text(call: dict) -> str:
    fn = call.get("function", call)
    args: Any = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return "<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False) + \
        "\n</tool_call>"


def default_tool_format(messages: list[dict], tools: Optional[list], system_role: bool = True) -> list[dict]:
    """Tool schemas, calls and results as plain system / assistant / user text in the default tool format."""
    out: list[dict] = []
    for m in messages:
        if m["role"] == "tool":
            block = "<tool_response>\n" + (m.get("content") or "") + "\n</tool_response>"
            if out and out[-1].get("_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_results": True})
        elif m.get("tool_calls"):
            text = "\n".join([m["content"]] * bool(m.get("content")) + [call_text(c) for c in m["tool_calls"]])
            out.append({**{k: v for k, v in m.items() if k != "tool_calls"}, "content": text})
        else:
            out.append(dict(m))
    for m in out:
        m.pop("_results", None)
    if tools:
        schema = tools_text(tools)
        if out and out[0]["role"] == "system":
            out[0]["content"] = (out[0]["content"] + "\n\n" if out[0].get("content") else "") + schema
        elif system_role:
            out.insert(0, {"role": "system", "content": schema})
        else:
            first = next((m for m in out if m["role"] == "user"), None)
            if first is not None:
                first["content"] = schema + "\n\n" + (first.get("content") or "")
    return out

"""Row formats -> chat messages (+ tools), as the peers publish them.

SFT rows -> {"messages": [...], "tools": [...]?}. Accepted:
- `messages` (OpenAI; ms-swift): roles system/user/assistant/tool, assistant `tool_calls` and
  `reasoning_content`, tool `tool_call_id`/`name`; ms-swift's `tool_call` / `tool_response` roles; per-turn
  `loss` (false = not trained); row `system` and `tools` (a list or a JSON string).
- ShareGPT / LLaMA-Factory: `conversations` of {from, value}; `function_call` and `observation` turns,
  row `system` and `tools`.
- alpaca (`instruction`/`input`/`output`, `system`, `history`); `query`/`response` (ms-swift, with its
  column aliases question/prompt -> query, answer/output/completion -> response).
GRPO rows -> {"prompt": [...], "reference": str | None, "tools"?}: any SFT row (the prompt is the conversation
before the last assistant turn, the reference that reply), a prompt-only conversation, or TRL's `prompt`
(string or messages); an `answer` / `solution` column is the reference when present.
DPO rows -> {"prompt": [...], "chosen": [...], "rejected": [...], "tools"?}: `prompt`/`chosen`/`rejected`
(strings or message lists), `messages` + `rejected_response` (ms-swift), query/instruction + chosen/rejected
or + response/rejected_response, ShareGPT ranking rows (`conversations` + `chosen`/`rejected` objects).
KTO rows -> {"prompt": [...], "completion": [...], "label": bool, "tools"?}: TRL's `prompt`/`completion`/`label`,
or any SFT row (its last assistant turn is the completion) with `label` (ms-swift) or `kto_tag` (LLaMA-Factory).
"""
from __future__ import annotations

import json
from typing import Optional

SFT_FORMATS = ("messages", "conversations/from/value (ShareGPT)", "instruction/input/output (alpaca)",
               "query/response")
DPO_FORMATS = ("prompt/chosen/rejected", "messages + rejected_response", "instruction/input/chosen/rejected (alpaca)",
               "query/response/rejected_response", "conversations + chosen/rejected (ShareGPT ranking)")
KTO_FORMATS = ("prompt/completion/label", "messages + label (ms-swift)", "conversations + kto_tag (LLaMA-Factory)",
               "any SFT row + label or kto_tag")
GRPO_FORMATS = ("messages (+ answer/solution)", "conversations/from/value (ShareGPT)", "instruction/input/output",
                "prompt/query (+ answer/solution)")
REFERENCE_COLUMNS = ("solution", "answer")
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
                  "bot": "assistant", "system": "system", "tool": "tool", "function": "tool", "observation": "tool",
                  "function_call": "tool_call", "tool_call": "tool_call"}
ROLES = ("system", "user", "assistant", "tool")
QUERY_ALIASES = ("query", "question", "prompt")
RESPONSE_ALIASES = ("response", "answer", "output", "completion")


class Skip(Exception):
    """This row does not fit the format being tried."""


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _json(value, what: str):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{what} must be JSON") from None
    return value


def tools_of(row: dict) -> Optional[list]:
    """The row's tool schemas as OpenAI {"type": "function", "function": {...}} entries, or None."""
    raw = row.get("tools")
    if raw in (None, "", []):
        return None
    tools = _json(raw, "tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError("tools must be a list of JSON-schema function objects")
    return [t if "function" in t else {"type": "function", "function": t} for t in tools]


def tool_call(value) -> dict:
    """One call ({name, arguments} or OpenAI's {id, type, function}) as OpenAI's shape, arguments an object."""
    value = _json(value, "tool call")
    if not isinstance(value, dict):
        raise ValueError("a tool call must be an object with name and arguments")
    fn = value.get("function", value)
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ValueError("a tool call needs a function name")
    args = fn.get("arguments", fn.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    out = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
    if value.get("id"):
        out["id"] = str(value["id"])
    return out


def _calls(value) -> list[dict]:
    value = _json(value, "function_call")
    return [tool_call(v) for v in (value if isinstance(value, list) else [value])]


def _message(m: dict, what: str) -> dict:
    if not isinstance(m, dict) or "role" not in m:
        raise ValueError(f"each of {what} needs 'role' and 'content'")
    role = m["role"]
    if role == "tool_call":
        return {"role": "assistant", "content": None, "tool_calls": _calls(m.get("content"))}
    if role == "tool_response":
        role = "tool"
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} in {what}; expected one of {', '.join(ROLES)}")
    calls = m.get("tool_calls") or m.get("function_call")
    if "content" not in m and not calls:
        raise ValueError(f"each of {what} needs 'role' and 'content'")
    content = m.get("content")
    out = {"role": role, "content": None if content in (None, "") and calls else _text(content, f"{what} content")}
    if calls and role == "assistant":
        out["tool_calls"] = _calls(calls)
    for key in ("tool_call_id", "name", "reasoning_content"):
        if m.get(key) is not None:
            out[key] = _text(m[key], f"{what} {key}")
    if m.get("loss") is not None and role == "assistant":
        out["loss"] = bool(m["loss"])
    return out


def _merge_calls(msgs: list[dict]) -> list[dict]:
    """Consecutive tool-call turns (ms-swift / ShareGPT write one per call) become one assistant turn."""
    out: list[dict] = []
    for m in msgs:
        if (m.get("tool_calls") and out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls")
                and not m.get("content")):
            out[-1]["tool_calls"] += m["tool_calls"]
        else:
            out.append(m)
    return out


def messages_of(value, what: str = "messages") -> list[dict]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{what} must be a non-empty list of {{role, content}} objects")
    return _merge_calls([_message(m, what) for m in value])


def _system(row: dict) -> list[dict]:
    system = row.get("system")
    return [{"role": "system", "content": _text(system, "system")}] if system else []


def _history(row: dict) -> list[dict]:
    out = []
    for pair in row.get("history") or []:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError("history must be a list of [question, answer] pairs")
        out += [{"role": "user", "content": _text(pair[0], "history question")},
                {"role": "assistant", "content": _text(pair[1], "history answer")}]
    return out


def _sharegpt_turn(turn) -> dict:
    if not isinstance(turn, dict) or "from" not in turn or "value" not in turn:
        raise ValueError("each conversations turn needs 'from' and 'value'")
    role = SHAREGPT_ROLES.get(str(turn["from"]).lower())
    if role is None:
        raise ValueError(f"unknown speaker {turn['from']!r}; expected one of {', '.join(SHAREGPT_ROLES)}")
    if role == "tool_call":
        return {"role": "assistant", "content": None, "tool_calls": _calls(turn["value"])}
    return {"role": role, "content": _text(turn["value"], "conversations value")}


def _sharegpt(convo) -> list[dict]:
    if not isinstance(convo, list) or not convo:
        raise ValueError("conversations must be a non-empty list of {from, value} objects")
    return _merge_calls([_sharegpt_turn(t) for t in convo])


def _first(row: dict, names) -> Optional[str]:
    return next((n for n in names if n in row), None)


def _question(row: dict) -> str:
    """The user turn of an alpaca / query-style row: instruction + optional input, or query (or an alias)."""
    if "instruction" in row:
        question = _text(row["instruction"], "instruction")
        extra = row.get("input")
        return f"{question}\n{_text(extra, 'input')}" if extra else question
    key = _first(row, QUERY_ALIASES) or "query"
    return _text(row[key], key)


def _with_tools(row: dict, out: dict) -> dict:
    tools = tools_of(row)
    if tools:
        out["tools"] = tools
    return out


def _conversation(row: dict) -> list[dict] | None:
    """The row's messages when it holds a whole conversation (OpenAI/ms-swift `messages`, ShareGPT
    `conversations`), with the row's system prompt first; None for the other layouts."""
    if "messages" in row:
        msgs = messages_of(row["messages"])
        return msgs if msgs[0]["role"] == "system" else _system(row) + msgs
    if "conversations" in row:
        return _system(row) + _sharegpt(row["conversations"])
    return None


def sft_row(row: dict) -> dict:
    """One SFT row in any accepted format -> {"messages": [...], "tools"?} ending with an assistant turn."""
    keys = row.keys()
    msgs = _conversation(row)
    if msgs is None:
        if "instruction" in keys and "output" in keys:
            key = "output"
        elif _first(row, QUERY_ALIASES) and _first(row, RESPONSE_ALIASES):
            key = _first(row, RESPONSE_ALIASES) or "response"
        else:
            raise Skip
        msgs = _system(row) + _history(row) + [{"role": "user", "content": _question(row)},
                                              {"role": "assistant", "content": _text(row[key], key)}]
    if msgs[-1]["role"] != "assistant":
        raise ValueError("the conversation must end with an assistant turn")
    return _with_tools(row, {"messages": msgs})


def _completion(value, what: str) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    if isinstance(value, dict) and "from" in value:          # ShareGPT ranking: {"from": "gpt", "value": ...}
        return [_sharegpt_turn(value)]
    msgs = messages_of([value] if isinstance(value, dict) else value, what)
    if msgs[-1]["role"] != "assistant":
        raise ValueError(f"{what} must end with an assistant turn")
    return msgs


def dpo_row(row: dict) -> dict:
    """One preference row in any accepted format -> {prompt, chosen, rejected} as message lists (+ tools)."""
    keys = row.keys()
    if "chosen" in keys and "rejected" in keys and "prompt" in keys:
        prompt = row["prompt"]
        prompt = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else messages_of(prompt, "prompt")
        prompt = _system(row) + prompt if not any(m["role"] == "system" for m in prompt) else prompt
        chosen, rejected = row["chosen"], row["rejected"]
    elif "messages" in keys and "rejected_response" in keys:
        msgs = messages_of(row["messages"])
        msgs = msgs if msgs[0]["role"] == "system" else _system(row) + msgs
        if msgs[-1]["role"] != "assistant":
            raise ValueError("messages must end with the chosen assistant turn")
        prompt, chosen, rejected = msgs[:-1], [msgs[-1]], row["rejected_response"]
    elif "conversations" in keys and "chosen" in keys and "rejected" in keys:
        prompt = _system(row) + _sharegpt(row["conversations"])
        chosen, rejected = row["chosen"], row["rejected"]
    elif "chosen" in keys and "rejected" in keys and ("instruction" in keys or _first(row, QUERY_ALIASES)):
        prompt = _system(row) + _history(row) + [{"role": "user", "content": _question(row)}]
        chosen, rejected = row["chosen"], row["rejected"]
    elif "rejected_response" in keys and _first(row, QUERY_ALIASES) and _first(row, RESPONSE_ALIASES):
        prompt = _system(row) + _history(row) + [{"role": "user", "content": _question(row)}]
        chosen, rejected = row[_first(row, RESPONSE_ALIASES)], row["rejected_response"]
    else:
        raise Skip
    out = {"prompt": prompt, "chosen": _completion(chosen, "chosen"), "rejected": _completion(rejected, "rejected")}
    return _with_tools(row, out)


def _label(value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"label must be true (a good completion) or false (a bad one), got {value!r}")


def kto_row(row: dict) -> dict:
    """One unpaired row in any accepted format -> {prompt, completion (messages), label (bool)} (+ tools)."""
    key = "label" if "label" in row else "kto_tag" if "kto_tag" in row else None
    if key is None:
        raise Skip
    if "prompt" in row and "completion" in row:
        prompt = row["prompt"]
        prompt = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else messages_of(prompt, "prompt")
        prompt = _system(row) + prompt if not any(m["role"] == "system" for m in prompt) else prompt
        out: dict = {"prompt": prompt, "completion": _completion(row["completion"], "completion")}
    else:
        msgs = sft_row({k: v for k, v in row.items() if k not in ("label", "kto_tag")})["messages"]
        out = {"prompt": msgs[:-1], "completion": msgs[-1:]}
    out["label"] = _label(row[key])
    return _with_tools(row, out)


def grpo_row(row: dict) -> dict:
    """One GRPO prompt in any accepted format -> {"prompt": messages, "reference": text or None, "tools"?}."""
    keys = row.keys()
    msgs = _conversation(row)
    if msgs is None and isinstance(row.get("prompt"), list):
        msgs = _system(row) + messages_of(row["prompt"], "prompt")
    elif msgs is None and ("instruction" in keys or _first(row, QUERY_ALIASES)):
        msgs = _system(row) + _history(row) + [{"role": "user", "content": _question(row)}]
        reply = _first(row, ("output",) + RESPONSE_ALIASES)
        if reply and reply not in REFERENCE_COLUMNS:
            msgs.append({"role": "assistant", "content": _text(row[reply], reply)})
    elif msgs is None:
        raise Skip
    reference = None
    if msgs[-1]["role"] == "assistant":
        reference = msgs[-1].get("content")
        msgs = msgs[:-1]
    column = _first(row, REFERENCE_COLUMNS)
    if column is not None and row[column] is not None:
        value = row[column]
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"{column} must be a string or a number, got {type(value).__name__}")
        reference = str(value)
    if not msgs or msgs[-1]["role"] not in ("user", "tool"):
        raise ValueError("the prompt must end with a user (or tool) turn")
    return _with_tools(row, {"prompt": msgs, "reference": reference})

"""Row formats -> chat messages (+ tools), as the peers publish them.

SFT rows -> {"messages": [...], "tools": [...]?}. Accepted:
- `messages` (OpenAI; ms-swift): roles system/user/assistant/tool, assistant `tool_calls` and
  `reasoning_content`, tool `tool_call_id`/`name`; ms-swift's `tool_call` / `tool_response` roles; per-turn
  `loss` (false = not trained) or OpenAI fine-tuning's `weight` (0 = not trained); row `system` and `tools` (a
  list or a JSON string). A row may end with tool results after the last reply (that reply trains).
- content as a string or as typed parts: OpenAI text parts, Anthropic blocks (`text`, `thinking`, `tool_use` ->
  a tool call, `tool_result` -> a tool turn), Mistral chunks (`text`, `thinking` -> reasoning).
- any row may set the chat template's switches for its conversation: `chat_template_kwargs` (`enable_thinking`,
  `reasoning_effort`, ... - swiftbox/template_switches.py, the list the server takes too); training renders with them.
- ShareGPT / LLaMA-Factory: `conversations` of {from, value}; `function_call` and `observation` turns,
  row `system` and `tools`; ms-swift's `conversation` of {human, assistant} pairs.
- alpaca (`instruction`/`input`/`output`, `system`, `history`); `query`/`response` with ms-swift's column
  aliases (query: prompt/question/problem; response: answer/output/completion/solution/target(s); system:
  system_prompt); TRL prompt-completion (`prompt`/`completion` strings, or message lists: only the completion
  trains).
GRPO rows -> {"prompt": [...], "reference": str | None, "tools"?}: any SFT row (the prompt is the conversation
before the last assistant turn, the reference that reply), a prompt-only conversation, or TRL's `prompt`
(string or messages); an `answer` / `solution` column is the reference when present.
DPO rows -> {"prompt": [...], "chosen": [...], "rejected": [...], "tools"?}: `prompt`/`chosen`/`rejected`
(strings or message lists, TRL's conversational preference), TRL's implicit prompt (`chosen`/`rejected` whole
conversations sharing their beginning), `messages` + `rejected_response` or + `rejected_messages` (ms-swift),
query/instruction + chosen/rejected or + response/rejected_response, ShareGPT ranking rows (`conversations` +
`chosen`/`rejected` objects).
KTO rows -> {"prompt": [...], "completion": [...], "label": bool, "tools"?}: TRL's `prompt`/`completion`/`label`,
or any SFT row (its last assistant turn is the completion) with `label` (ms-swift) or `kto_tag` (LLaMA-Factory).
"""
from __future__ import annotations

import json
from typing import Optional

from swiftbox import template_switches as template_kwargs

SFT_FORMATS = ("messages", "conversations/from/value (ShareGPT)", "conversation/human/assistant (ms-swift)",
               "instruction/input/output (alpaca)", "query/response (or an alias: question/answer, problem/solution)",
               "prompt/completion (TRL)")
DPO_FORMATS = ("prompt/chosen/rejected", "chosen/rejected conversations (TRL implicit prompt)",
               "messages + rejected_response or rejected_messages", "instruction/input/chosen/rejected (alpaca)",
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
QUERY_ALIASES = ("query", "question", "prompt", "problem")
RESPONSE_ALIASES = ("response", "answer", "output", "completion", "solution", "target", "targets")
SYSTEM_ALIASES = ("system", "system_prompt")
PAIR_USER = ("human", "user")                     # ms-swift `conversation` items: {"human": q, "assistant": a}
PAIR_ASSISTANT = ("assistant", "gpt", "bot")


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
    """The row's tool schemas as OpenAI {"type": "function", "function": {...}} entries (Anthropic's
    `input_schema` read as `parameters`), or None."""
    raw = row.get("tools")
    if raw in (None, "", []):
        return None
    tools = _json(raw, "tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError("tools must be a list of JSON-schema function objects")
    out = []
    for t in tools:
        fn = t.get("function", t)
        if "input_schema" in fn and "parameters" not in fn:        # Anthropic: {name, description, input_schema}
            fn = {**{k: v for k, v in fn.items() if k != "input_schema"}, "parameters": fn["input_schema"]}
        out.append({"type": "function", "function": fn})
    return out


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


def _text_of(parts, what: str) -> str:
    """A tool result's or a thinking chunk's content: a string, or text parts."""
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        return "".join(_text(p.get("text") if isinstance(p, dict) else p, f"{what} text") for p in parts
                       if not isinstance(p, dict) or p.get("type", "text") == "text")
    raise ValueError(f"{what} must be a string or a list of text parts")


def _parts(content, what: str) -> dict:
    """Typed content parts -> {text, reasoning, calls, results}. OpenAI / Mistral `text` parts, Anthropic and
    Mistral `thinking` (reasoning), Anthropic `tool_use` (a call) and `tool_result` (a tool turn)."""
    out: dict = {"text": [], "reasoning": [], "calls": [], "results": []}
    for part in content:
        if isinstance(part, str):
            out["text"].append(part)
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "input_text", "output_text"):
            out["text"].append(_text(part.get("text"), f"{what} text part"))
        elif kind == "thinking":
            out["reasoning"].append(_text_of(part.get("thinking"), f"{what} thinking part"))
        elif kind == "redacted_thinking":
            continue                                   # opaque: nothing to train on
        elif kind == "tool_use":
            out["calls"].append(tool_call({"id": part.get("id"), "name": part.get("name"),
                                           "arguments": part.get("input", {})}))
        elif kind == "tool_result":
            out["results"].append({"role": "tool", "content": _text_of(part.get("content", ""), f"{what} tool_result"),
                                   **({"tool_call_id": str(part["tool_use_id"])} if part.get("tool_use_id") else {})})
        else:
            raise ValueError(f"{what}: content part type {kind!r} is not supported (text models read text, "
                             f"thinking, tool_use and tool_result parts)")
    return out


def _message(m: dict, what: str) -> list[dict]:
    """One input message -> one or more chat messages (Anthropic tool_result blocks become tool turns)."""
    if not isinstance(m, dict) or "role" not in m:
        raise ValueError(f"each of {what} needs 'role' and 'content'")
    role = m["role"]
    if role == "tool_call":
        return [{"role": "assistant", "content": None, "tool_calls": _calls(m.get("content"))}]
    if role == "tool_response":
        role = "tool"
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} in {what}; expected one of {', '.join(ROLES)}")
    calls = m.get("tool_calls") or m.get("function_call")
    if "content" not in m and not calls:
        raise ValueError(f"each of {what} needs 'role' and 'content'")
    content = m.get("content")
    reasoning, results, extra_calls = [], [], []
    if isinstance(content, list):
        parts = _parts(content, what)
        content = "".join(parts["text"])
        reasoning, results, extra_calls = parts["reasoning"], parts["results"], parts["calls"]
    out = {"role": role, "content": None if content in (None, "") and (calls or extra_calls)
           else _text(content, f"{what} content")}
    if role == "assistant" and (calls or extra_calls):
        out["tool_calls"] = (_calls(calls) if calls else []) + extra_calls
    for key in ("tool_call_id", "name", "reasoning_content"):
        if m.get(key) is not None:
            out[key] = _text(m[key], f"{what} {key}")
    if reasoning and "reasoning_content" not in out:
        out["reasoning_content"] = "\n".join(reasoning)
    if role == "assistant":
        if m.get("loss") is not None:
            out["loss"] = bool(m["loss"])
        if m.get("weight") is not None:              # OpenAI fine-tuning: 0 = this reply is not trained
            if m["weight"] not in (0, 1) or isinstance(m["weight"], bool):
                raise ValueError(f"{what} weight must be 0 (not trained) or 1, got {m['weight']!r}")
            out["loss"] = bool(m["weight"]) and out.get("loss", True)
    if results:
        return results + ([out] if out["content"] else [])
    return [out]


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
    return _merge_calls([one for m in value for one in _message(m, what)])


def _system(row: dict) -> list[dict]:
    key = _first(row, SYSTEM_ALIASES)
    system = row.get(key) if key else None
    return [{"role": "system", "content": _text(system, key or "system")}] if system else []


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
    """`out` plus the row's tool schemas and its chat-template switches (`chat_template_kwargs`, checked against
    swiftbox.template_switches: an unknown or ill-typed switch is bad input naming it)."""
    tools = tools_of(row)
    if tools:
        out["tools"] = tools
    switches = template_kwargs.checked(row.get("chat_template_kwargs"))
    if switches:
        out["chat_template_kwargs"] = switches
    return out


def with_switches(rows: list[dict], switches: Optional[dict]) -> list[dict]:
    """Normalised rows with a step's `chat_template_kwargs` as the defaults of their own (a row's own switches win):
    every row then renders - for training and for its generation prompt - with the same switches."""
    if not switches:
        return rows
    return [dict(row, chat_template_kwargs={**switches, **(row.get("chat_template_kwargs") or {})}) for row in rows]


def _conversation(row: dict) -> list[dict] | None:
    """The row's messages when it holds a whole conversation (OpenAI/ms-swift `messages`, ShareGPT
    `conversations`), with the row's system prompt first; None for the other layouts."""
    if "messages" in row:
        msgs = messages_of(row["messages"])
        return msgs if msgs[0]["role"] == "system" else _system(row) + msgs
    if "conversations" in row:
        return _system(row) + _sharegpt(row["conversations"])
    if "conversation" in row:
        return _system(row) + _pairs_or_sharegpt(row["conversation"])
    return None


def _pairs_or_sharegpt(convo) -> list[dict]:
    """ms-swift's `conversation` column: [{human, assistant}, ...] pairs, or ShareGPT / OpenAI turns."""
    if not isinstance(convo, list) or not convo:
        raise ValueError("conversation must be a non-empty list")
    if all(isinstance(t, dict) and "from" in t for t in convo):
        return _sharegpt(convo)
    if all(isinstance(t, dict) and "role" in t for t in convo):
        return messages_of(convo, "conversation")
    out = []
    for turn in convo:
        user, reply = (_first(turn, PAIR_USER), _first(turn, PAIR_ASSISTANT)) if isinstance(turn, dict) else (None,) * 2
        if user is None or reply is None:
            raise ValueError("each conversation item needs a human (or user) and an assistant (or gpt) entry")
        out += [{"role": "user", "content": _text(turn[user], f"conversation {user}")},
                {"role": "assistant", "content": _text(turn[reply], f"conversation {reply}")}]
    return out


def _prompt_completion(row: dict) -> Optional[list[dict]]:
    """TRL's prompt-completion rows with message lists: the prompt's own replies are context, not trained."""
    prompt, completion = row.get("prompt"), row.get("completion")
    if not isinstance(prompt, list) and not isinstance(completion, list):
        return None
    head = [{"role": "user", "content": _text(prompt, "prompt")}] if isinstance(prompt, str) \
        else messages_of(prompt, "prompt")
    head = [dict(m, loss=False) if m["role"] == "assistant" else m for m in head]
    if not any(m["role"] == "system" for m in head):
        head = _system(row) + head
    return head + _completion(completion, "completion")


def sft_row(row: dict) -> dict:
    """One SFT row in any accepted format -> {"messages": [...], "tools"?} with an assistant reply (possibly
    followed by the tool results it asked for)."""
    keys = row.keys()
    msgs = _conversation(row)
    if msgs is None and "prompt" in keys and "completion" in keys:
        msgs = _prompt_completion(row)
    if msgs is None:
        if "instruction" in keys and "output" in keys:
            key = "output"
        elif _first(row, QUERY_ALIASES) and _first(row, RESPONSE_ALIASES):
            key = _first(row, RESPONSE_ALIASES) or "response"
        else:
            raise Skip
        msgs = _system(row) + _history(row) + [{"role": "user", "content": _question(row)},
                                              {"role": "assistant", "content": _text(row[key], key)}]
    last = max((i for i, m in enumerate(msgs) if m["role"] == "assistant"), default=-1)
    if last < 0 or any(m["role"] != "tool" for m in msgs[last + 1:]):
        raise ValueError("the conversation must end with an assistant turn (or with the tool results it asked for)")
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


def _split_shared(system: list[dict], chosen: list[dict], rejected: list[dict]) -> tuple[list, list, list]:
    """Two whole conversations -> (their shared beginning, the chosen rest, the rejected rest)."""
    n = 0
    while n < min(len(chosen), len(rejected)) and chosen[n] == rejected[n]:
        n += 1
    while n and chosen[n - 1]["role"] == "assistant":     # the differing replies start after a user/tool turn
        n -= 1
    if n == 0 or not chosen[n:] or not rejected[n:]:
        raise ValueError("chosen and rejected must share their prompt (the turns before the differing replies)")
    prompt = chosen[:n]
    return (prompt if prompt[0]["role"] == "system" else system + prompt), chosen[n:], rejected[n:]


def dpo_row(row: dict) -> dict:
    """One preference row in any accepted format -> {prompt, chosen, rejected} as message lists (+ tools)."""
    keys = row.keys()
    if "messages" in keys and "rejected_messages" in keys:                 # ms-swift: two whole conversations
        chosen_msgs = messages_of(row["messages"])
        rejected_msgs = messages_of(row["rejected_messages"], "rejected_messages")
        prompt, chosen, rejected = _split_shared(_system(row), chosen_msgs, rejected_msgs)
    elif "chosen" in keys and "rejected" in keys and "prompt" not in keys and isinstance(row["chosen"], list) \
            and isinstance(row["rejected"], list) and not _first(row, QUERY_ALIASES + ("instruction", "conversations")):
        prompt, chosen, rejected = _split_shared(_system(row), messages_of(row["chosen"], "chosen"),
                                                 messages_of(row["rejected"], "rejected"))   # TRL implicit prompt
    elif "chosen" in keys and "rejected" in keys and "prompt" in keys:
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
        if msgs[-1]["role"] != "assistant":
            raise ValueError("a KTO row must end with the assistant completion it labels")
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

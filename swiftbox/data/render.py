"""Where each assistant reply sits in the chat template's rendering of the whole conversation.

The labelled text of a conversation is exactly what the template renders for each assistant reply (its
reasoning, content and tool calls as printed there) plus the end-of-turn marker after it, found in the ONE
full rendering. Two ways, both right by construction:

- templates with `{% generation %}` markers: transformers reports the marked tokens
  (`return_assistant_tokens_mask`); their character spans are read off the token offsets;
- any other template: render the conversation a second time with only reply i's payload altered (every
  non-blank character of its content, reasoning and tool-call values changed, the structure kept). The two
  renderings differ exactly where the template prints that payload; the span is widened back to the end of
  the assistant header (the text `add_generation_prompt` adds, or its longest prefix found there) and
  forward over the end-of-turn marker.

Partial renderings are never subtracted from each other, so templates that render earlier turns differently
from the last (Qwen3, DeepSeek-R1, Mistral with a system prompt) come out right. A template that drops a
reply, or prints it where other turns' text would fall inside its span, is refused (UserError) with a remedy.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any, Optional

from swiftbox.compat import TemplateOutputTooLong
from swiftbox.data import dialect, template_budget
from swiftbox.errors import UserError

THINK_TAG = re.compile(r"</?think>")
GAP_LIMIT = 200          # most characters of decoration between a reply's last payload char and its end marker
MIN_FOREIGN = 4          # other turns' texts shorter than this are not checked for inside a reply span


@dataclass(frozen=True)
class Span:
    message: int         # index of the assistant message in the conversation
    start: int           # character offsets into the rendering
    end: int


def template_name(tokenizer) -> str:
    return str(getattr(tokenizer, "name_or_path", "") or "the tokenizer")


def has_generation_markers(tokenizer) -> bool:
    template = getattr(tokenizer, "chat_template", None) or ""
    return isinstance(template, str) and re.search(r"{%-?\s*generation\s*-?%}", template) is not None


def _clean(messages: list[dict]) -> list[dict]:
    """Messages as the template should see them: swiftbox's own keys (per-turn `loss`) removed."""
    return [{k: v for k, v in m.items() if k != "loss"} for m in messages]


def render(tokenizer, messages: list[dict], tools: Optional[list] = None, *, generation_prompt: bool = False,
           **template_kwargs: Any) -> str:
    """The template's text for `messages`, in the form the template prints (data.dialect: the default tool format
    for templates without tool calls, thinking chunks for templates that print only those). A template error is
    bad input: one line naming the template."""
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": generation_prompt, **template_kwargs}
    msgs, tools = dialect.adapt(tokenizer, _clean(messages), tools)
    name = template_name(tokenizer)
    try:
        with template_budget.budget(name, template_budget.template_sources(tokenizer, kwargs.get("chat_template"))):
            return dialect.apply(tokenizer, msgs, tools, kwargs)
    except (TemplateOutputTooLong, UserError):  # the server's cap / the time and size budget (template_budget.py)
        raise
    except Exception as first:  # noqa: BLE001 - a template raising is the data's or template's fault
        reason = str(first).splitlines()[0] if str(first) else type(first).__name__
        raise UserError(f"the chat template of {template_name(tokenizer)} rejected a conversation ({reason}); "
                        f"check the roles/order the model accepts or give chat_template: a .jinja file") from None


# -- altering one reply's payload -------------------------------------------------------------------------
def _alter_text(text: str) -> str:
    """Every non-blank character changed, blanks and <think> tags kept (templates strip / split on them)."""
    out, pos = [], 0
    for match in THINK_TAG.finditer(text):
        out.append(_alter_chars(text[pos:match.start()]))
        out.append(match.group())
        pos = match.end()
    out.append(_alter_chars(text[pos:]))
    return "".join(out)


def _alter_chars(text: str) -> str:
    return "".join(c if c.isspace() else ("b" if c == "a" else "a") for c in text)


def _alter_value(value):
    if isinstance(value, str):
        return _alter_text(value)
    if isinstance(value, bool) or value is None:
        return (not value) if isinstance(value, bool) else value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, list):
        return [_alter_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _alter_value(v) for k, v in value.items()}
    return value


def _altered(message: dict) -> dict:
    m = copy.deepcopy(message)
    if isinstance(m.get("content"), str):
        m["content"] = _alter_text(m["content"])
    if isinstance(m.get("reasoning_content"), str):
        m["reasoning_content"] = _alter_text(m["reasoning_content"])
    for call in m.get("tool_calls") or []:
        fn = call.get("function", {})
        if isinstance(fn.get("name"), str) and fn.get("arguments") in (None, "", "{}", {}):
            fn["name"] = _alter_text(fn["name"])    # else kept: templates print it again in the tool's answer
        if isinstance(fn.get("arguments"), str):
            try:
                fn["arguments"] = json.dumps(_alter_value(json.loads(fn["arguments"])), ensure_ascii=False)
            except ValueError:
                fn["arguments"] = _alter_text(fn["arguments"])
        elif "arguments" in fn:
            fn["arguments"] = _alter_value(fn["arguments"])
    return m


def payload_texts(message: dict) -> list[str]:
    texts = [message.get("content") or "", message.get("reasoning_content") or ""]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        texts += [str(fn.get("name", "")), json.dumps(fn.get("arguments"), ensure_ascii=False)]
    return [t for t in texts if t]


def _diff(a: str, b: str) -> tuple[int, int]:
    """Start and end (in `a`) of the region where `a` and `b` differ."""
    limit = min(len(a), len(b))
    p = 0
    while p < limit and a[p] == b[p]:
        p += 1
    s = 0
    while s < limit - p and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
        s += 1
    return p, len(a) - s


# -- the template's fixed pieces -------------------------------------------------------------------------
def header(tokenizer, before: list[dict], tools, **kw) -> str:
    """What `add_generation_prompt` appends after `before`: the assistant header (and any forced prefix)."""
    if not before:
        return ""
    try:
        with_prompt = render(tokenizer, before, tools, generation_prompt=True, **kw)
        without = render(tokenizer, before, tools, **kw)
    except UserError:
        return ""
    p = 0
    while p < min(len(with_prompt), len(without)) and with_prompt[p] == without[p]:
        p += 1
    return with_prompt[p:]


_PROBES: dict = {}


def _memo(kind: str, tokenizer, kw: dict, compute) -> Any:
    """Per-template facts (end-of-turn marker, user closing text) computed once per tokenizer + template."""
    key = (kind, id(tokenizer), getattr(tokenizer, "chat_template", None), tuple(sorted(kw.items())))
    if key not in _PROBES:
        _PROBES[key] = compute()
    return _PROBES[key]


def end_of_turn(tokenizer, **kw) -> str:
    """What the template writes right after its last reply to close it (<|im_end|>, <|eot_id|>, </s>, gpt-oss's
    <|return|>, Kimi-K3's whole `<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>`, ...); for a
    template that closes a reply only when another turn follows (Hunyuan 3, Apertus), that closing; '' for
    templates that write none (GLM, Baichuan2: the next role's header ends the turn)."""
    last, *rest = end_markers(tokenizer, **kw)
    return last or (rest[0] if rest else "")


def end_markers(tokenizer, **kw) -> tuple[str, ...]:
    """The closings the template writes right after a reply: the last reply's first, then an earlier reply's when
    it differs (gpt-oss ends the last turn with <|return|>, earlier ones with <|end|>; Hunyuan 3 ends the last turn
    with nothing, earlier ones with <｜hy_eos｜>); ('',) for none."""
    return _memo("eot", tokenizer, kw, lambda: _end_markers(tokenizer, **kw))


def _ping_pong(tokenizer, turns: int = 1, **kw) -> str:
    """The template's render of `turns` user turns (PING) each answered (PONG); '' when it refuses to render."""
    probe = [{"role": "user", "content": "PING"}, {"role": "assistant", "content": "PONG"}] * turns
    try:
        return render(tokenizer, probe, **kw)
    except UserError:
        return ""


def _marker_after(tokenizer, trailer: str) -> str:
    specials = sorted((t for t in getattr(tokenizer, "all_special_tokens", []) or [] if t), key=len, reverse=True)
    for tok in specials:
        if trailer.startswith(tok):
            return tok
    close = re.match(r"(<[^<>\s]+>|\[[^\[\]\s]+\])", trailer)    # <...>, </s> or [...]; not plain text
    return close.group() if close else ""


def _boundary(text: str, k: int) -> int:
    """The first position at or after k where a marker or a line may start (not inside `<|...|>` or a word)."""
    while 0 < k < len(text) and not (text[k] in "<[" or text[k - 1] in ">]" or text[k - 1].isspace()):
        k += 1
    return k


def _end_markers(tokenizer, **kw) -> tuple[str, ...]:
    """The last reply's closing is all the template writes after it (a whole run of special tokens, trailing
    blanks left out). An earlier reply's is what the template writes between it and the next user turn, less the
    next user turn's header: the same closing as the last reply's; or the marker that ends every message (it ends
    the user turn too: gpt-oss <|end|>); or what is left when the text before the first user turn's content (BOS,
    default system prompt, user header) is taken off its end, cut at a marker's start (Hunyuan 3 <｜hy_eos｜>,
    Apertus <|assistant_end|>; GLM: nothing)."""
    one = _ping_pong(tokenizer, **kw)
    if not one:
        return ("",)
    at = one.rfind("PONG")
    last = one[at + 4:].rstrip() if at >= 0 else ""
    two = _ping_pong(tokenizer, 2, **kw)
    asked, first = two.find("PING"), two.find("PONG")
    again = two.find("PING", first) if first >= 0 else -1
    if not (0 <= asked < first < again):
        return (last,)
    gap = two[first + 4:again]
    if last and gap.startswith(last):
        return (last,)
    marker = _marker_after(tokenizer, gap)
    if marker and two.startswith(marker, asked + 4):     # ends every message, the user's too
        earlier = marker
    else:
        before = two[:asked]
        n = 0
        while n < min(len(gap), len(before)) and gap[len(gap) - 1 - n] == before[len(before) - 1 - n]:
            n += 1
        earlier = gap[:_boundary(gap, len(gap) - n)].rstrip()
    return (last, earlier) if earlier and earlier != last else (last,)


# -- spans -------------------------------------------------------------------------------------------------
def _refuse(tokenizer, turn: int, why: str) -> UserError:
    return UserError(f"chat template of {template_name(tokenizer)}: {why} (assistant message {turn + 1}); swiftbox "
                     f"will not guess which tokens to train. Remedy: give chat_template: a .jinja file that renders "
                     f"every reply (ideally with {{% generation %}} markers), or reshape the data")


TRAINING_FLAGS = ("is_training",)     # template variables that ask for the training rendering (Hunyuan 3)
FOLLOWER = {"role": "user", "content": "PROBEFOLLOW7Q"}
TAIL = 24        # characters of a last reply's rendering that locate it again once another turn follows


def training_kwargs(tokenizer, kw: dict) -> dict:
    """`kw` plus the training flag(s) the template reads (`is_training`: Hunyuan 3 then closes its last reply and
    keeps every turn's reasoning), unless given: training renders conversations as the template renders them for
    training."""
    source = getattr(tokenizer, "chat_template", None)
    source = source if isinstance(source, str) else ""
    flags = {f: True for f in TRAINING_FLAGS if f not in kw and re.search(rf"\b{f}\b", source)}
    return {**flags, **kw}


def rendered(tokenizer, messages: list[dict], tools: Optional[list] = None, **kw) -> str:
    """The rendering training sees: the template's own, and where the template writes nothing after a last reply,
    what it writes after that reply once the conversation goes on (Apertus and Hunyuan 3 close a reply only when
    another turn follows: that closing is trained too), found by rendering so - never guessed. Refused (UserError)
    where the conversation that goes on is not a continuation of this one: then how the template closes a reply
    cannot be told."""
    text = render(tokenizer, messages, tools, **kw)
    if not messages or messages[-1]["role"] != "assistant":
        return text
    last, *rest = end_markers(tokenizer, **kw)
    if last:
        return text
    closing = rest[0] if rest else ""
    if not closing and _memo("earlier", tokenizer, kw, lambda: _ping_pong(tokenizer, 2, **kw).count("PONG") == 2):
        return text     # an earlier reply shows the template closes replies with nothing (GLM, Baichuan2)
    calls = messages[-1].get("tool_calls") or []
    if calls:     # what follows a tool call is its result: where that does not close the turn (Apertus prints the
        result = {"role": "tool", "content": "PROBERESULT7Q", "tool_call_id": str(calls[0].get("id") or "")}
        try:      # result inside the model's turn), the call's own markup ends the reply
            follow = render(tokenizer, messages + [result], tools, **kw)
        except UserError:
            follow = ""
        if follow.startswith(text) and not (closing and follow[len(text):].lstrip().startswith(closing)):
            return text
    follow = render(tokenizer, messages + [FOLLOWER], tools, **kw)
    if not closing:
        if not follow.startswith(text):
            raise _refuse(tokenizer, len(messages) - 1, "the template writes nothing after a last reply and renders "
                                                        "the conversation differently once another turn follows, so "
                                                        "how it closes a reply cannot be told")
        return text
    # the reply as rendered last (its end: the text's end) and, once a turn follows, the closing right after it; the
    # history before it may render differently then (templates drop earlier turns' reasoning)
    content = messages[-1].get("content")
    own = content.rstrip()[-TAIL:] if isinstance(content, str) and content.strip() else ""
    tail = own if own and text.rstrip().endswith(own) else text[-min(len(text), TAIL):]
    at = follow.rfind(tail, 0, len(follow) - len(FOLLOWER["content"]))
    after = follow[at + len(tail):] if at >= 0 else ""
    gap = len(after) - len(after.lstrip())
    if at < 0 or not after.startswith(closing.lstrip(), gap):
        raise _refuse(tokenizer, len(messages) - 1, f"the template closes a reply ({closing.strip()}) only when "
                                                    f"another turn follows, and not after this one")
    return text + after[:gap + len(closing.lstrip())]


def locate(tokenizer, messages: list[dict], tools: Optional[list] = None, **kw) -> tuple[str, list[Span]]:
    """The full rendering of `messages` for training (`rendered`, with the template's training flag) and the span of
    every assistant reply in it (in message order)."""
    kw = training_kwargs(tokenizer, kw)
    text = rendered(tokenizer, messages, tools, **kw)
    if has_generation_markers(tokenizer):
        marked = _marked_spans(tokenizer, messages, tools, text, **kw)
        if marked is not None:
            return text, [_trim_marked(tokenizer, messages, tools, text, span, **kw) for span in marked]
    eot = end_markers(tokenizer, **kw)
    spans: list[Span] = []
    prev_end = 0
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    for i in replies:
        alt = rendered(tokenizer, messages[:i] + [_altered(messages[i])] + messages[i + 1:], tools, **kw)
        start, end = _diff(text, alt)
        if start >= end:
            if not payload_texts(messages[i]):
                continue    # an empty reply: nothing to train
            raise _refuse(tokenizer, i, "the template does not render this reply (content, reasoning or tool calls)")
        start = _widen_start(tokenizer, messages, i, tools, text, prev_end, start, **kw)
        agreed, alone = _agreement(tokenizer, messages, i, tools, text, end, **kw)
        marked_end = _widen_end(text, end, eot, messages[i + 1:], agreed)
        end = marked_end if marked_end > end else _closing_markup(text, end, agreed, alone, messages[i + 1:])
        _check_foreign(tokenizer, messages, i, text[start:end])
        if start < prev_end:
            raise _refuse(tokenizer, i, "this reply's text overlaps the previous reply's")
        spans.append(Span(i, start, end))
        prev_end = end
    return text, spans


def _widen_start(tokenizer, messages, i, tools, text, prev_end, start, **kw) -> int:
    """Back to the end of the assistant header; for templates without one (Mistral: the reply follows
    [/INST]), back to the end of the preceding user turn's closing text."""
    head = header(tokenizer, messages[:i], tools, **kw)
    region = text[prev_end:start]
    for n in range(len(head), 0, -1):
        if n < len(head) and not (head[n - 1] in ">]" or head[n - 1].isspace()):
            continue    # a shorter header only up to a marker's or a line's end (Gemma 4: not into `<|channel>`)
        at = region.rfind(head[:n])
        if at >= 0:
            return prev_end + at + n
    if head or i == 0 or messages[i - 1]["role"] != "user" or not messages[i - 1].get("content"):
        return start
    user_start, user_end = _diff(text, rendered(tokenizer, messages[:i - 1] + [_altered(messages[i - 1])]
                                              + messages[i:], tools, **kw))
    closing = _user_closing(tokenizer, **kw)
    if closing and prev_end <= user_end <= start and text.startswith(closing, user_end):
        return user_end + len(closing)
    return start


def _user_closing(tokenizer, **kw) -> str:
    """What a template writes between a user turn's text and the reply when it has no assistant header."""
    return _memo("closing", tokenizer, kw, lambda: _closing(tokenizer, **kw))


def _closing(tokenizer, **kw) -> str:
    text = _ping_pong(tokenizer, **kw)
    if not text:
        return ""
    a, b = text.rfind("PING"), text.rfind("PONG")
    return text[a + 4:b] if 0 <= a < b else ""


def _widen_end(text: str, end: int, markers: tuple[str, ...], later: list[dict], agreed: int) -> int:
    """Forward over the nearest end-of-turn marker, when only decoration (no later turn's text) lies before it and
    it starts no later than `agreed` (where the conversation cut after this reply stops agreeing with the whole)."""
    found = [(at, m) for m in markers if m for at in [text.find(m, end)] if 0 <= at and at - end <= GAP_LIMIT]
    if not found:
        return end
    at, marker = min(found)
    gap = text[end:at]
    for content in (m.get("content") for m in later):
        if isinstance(content, str) and content.strip() and (content in gap or json.dumps(content)[1:-1] in gap):
            return end
    return at + len(marker)


def _agreement(tokenizer, messages, i, tools, text, end, **kw) -> tuple[int, str]:
    """How far the conversation cut right after reply i renders like the whole one (len(text) when it cannot
    tell: the cut renders differently before the reply, or not at all), and that cut rendering."""
    if i == len(messages) - 1:
        return len(text), text
    try:
        alone = render(tokenizer, messages[:i + 1], tools, **kw)
    except UserError:
        return len(text), ""
    if text[:end] != alone[:end]:
        return len(text), ""
    p, limit = end, min(len(text), len(alone))
    while p < limit and text[p] == alone[p]:
        p += 1
    return p, alone


def _closing_markup(text: str, end: int, agreed: int, alone: str, later: list[dict]) -> int:
    """No end-of-turn marker right after the reply (GLM writes none; Gemma 4 continues the model's turn with the
    tool's answer): forward over the reply's own closing markup (`</arg_value>\n</tool_call>`, `}<tool_call|>
    <|tool_response>`), i.e. as far as the conversation cut right after this reply agrees with the whole one when
    that cut ends there, trailing blanks left out. Never across other turns' text."""
    if not alone or alone[agreed:].strip():
        return end    # the cut conversation ends differently (its last turn's own marker): no shared closing
    tail = text[end:agreed].rstrip()
    if len(tail) > GAP_LIMIT or any(c.strip() and c in tail for c in (m.get("content") or "" for m in later)):
        return end
    return end + len(tail)


def _check_foreign(tokenizer, messages, i, span_text: str) -> None:
    own = payload_texts(messages[i])
    for j, m in enumerate(messages):
        content = m.get("content") or ""
        if j == i or len(content.strip()) < MIN_FOREIGN or not isinstance(content, str):
            continue
        if content in span_text and not any(content in t for t in own):
            raise _refuse(tokenizer, i, f"message {j + 1} ({m['role']}) would fall inside this reply's span")


def _trim_marked(tokenizer, messages, tools, text, span: Span, **kw) -> Span:
    """A marked span as the model emits it: without the assistant header the generation prompt already holds
    (SmolLM3 marks `<|im_start|>assistant\n` too) and without blanks after the end-of-turn marker; refused when
    the template drops the reply's payload (marks an empty turn for a tool call it does not print)."""
    i = span.message
    if payload_texts(messages[i]):
        alt = rendered(tokenizer, messages[:i] + [_altered(messages[i])] + messages[i + 1:], tools, **kw)
        first, last = _diff(text, alt)
        if first >= last or first < span.start or last > span.end:
            raise _refuse(tokenizer, i, "the template does not render this reply (content, reasoning or tool calls) "
                                        "inside its {% generation %} block")
    start, end = span.start, span.end
    head = header(tokenizer, messages[:i], tools, **kw)
    for n in range(len(head), 0, -1):   # the header, or as much of it as the marked turn starts with (Laguna's
        if n < len(head) and not (head[n - 1] in ">]" or head[n - 1].isspace()):   # prompt closes thinking, a
            continue                                                                # reasoning turn opens it)
        if text.startswith(head[:n], start) and start + n <= end:
            start += n
            break
    end = start + len(text[start:end].rstrip())
    return Span(i, start, end)


def _marked_spans(tokenizer, messages, tools, text, **kw) -> Optional[list[Span]]:
    """Spans from {% generation %} markers (transformers' assistant mask), or None when unusable here."""
    kwargs = {"tokenize": True, "return_dict": True, "return_assistant_tokens_mask": True, **kw}
    msgs, tools = dialect.adapt(tokenizer, _clean(messages), tools)
    try:
        enc = dialect.apply(tokenizer, msgs, tools, kwargs)
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except Exception:  # noqa: BLE001 - slow tokenizer or template without usable markers: locate instead
        return None
    if list(enc["input_ids"]) != list(offsets["input_ids"]):
        return None
    mask, spans_chars = list(enc["assistant_masks"]), []
    k = 0
    while k < len(mask):
        if mask[k]:
            j = k
            while j < len(mask) and mask[j]:
                j += 1
            spans_chars.append((offsets["offset_mapping"][k][0], offsets["offset_mapping"][j - 1][1]))
            k = j
        else:
            k += 1
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if len(spans_chars) != len(replies):
        return None
    return [Span(i, s, e) for i, (s, e) in zip(replies, spans_chars)]

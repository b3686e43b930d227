"""Conversations to token ids + labels (SFT), prompt/completion strings (DPO) and scored tokens (eval choices),
all from the reply spans `render.locate` finds in the one full rendering.

Long rows are truncated the way the peers do it: the prompt loses tokens from the left, the system prompt and
the (last) reply are kept; a row is dropped only when that reply alone cannot fit in `max_length`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from swiftbox.data.progress import each
from swiftbox.data.render import Span, locate, payload_texts, render
from swiftbox.errors import UserError

IGNORE = -100


@dataclass
class Encoded:
    input_ids: list[int]
    labels: list[int]
    replies: list[tuple[int, int]] = field(default_factory=list)   # token [start, end) of each labelled reply
    head: int = 0                                                  # tokens of the leading system prompt


@dataclass
class Counts:
    rows: int = 0
    truncated: int = 0
    dropped: int = 0


def switches(row: dict) -> dict:
    """The row's chat-template switches (`chat_template_kwargs`, checked by data.formats): training renders the
    conversation, and the DPO / GRPO prompt, with them."""
    return dict(row.get("chat_template_kwargs") or {})


def token_spans(tokenizer, text: str, spans: list[Span]) -> tuple[list[int], list[int]]:
    """Token ids of `text` and, per token, the index of the span it starts in (-1 outside every span).
    Fast tokenizers: one pass with offsets, kept when every span boundary falls between tokens. Slow ones
    (remote-code tokenizers), and a merge across a boundary (a reply's last characters fused with plain template
    text after it, e.g. `.<|` when `<|user|>` is not a special token): span by span, so the labels hold exactly
    the reply's characters and never a piece of the template around it."""
    bounds = sorted((s.start, s.end) for s in spans)
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        owner, k, straddles = [], 0, False
        for start, end in enc["offset_mapping"]:
            while k < len(bounds) and start >= bounds[k][1]:
                k += 1
            inside = k < len(bounds) and bounds[k][0] <= start < bounds[k][1]
            owner.append(k if inside else -1)
            crosses_end = inside and end > bounds[k][1]
            crosses_start = not inside and k < len(bounds) and start < bounds[k][0] < end
            straddles = straddles or crosses_end or crosses_start
        if not straddles:
            return list(enc["input_ids"]), owner
    ids, owner, pos = [], [], 0
    for k, (start, end) in enumerate(bounds):
        for piece, who in ((text[pos:start], -1), (text[start:end], k)):
            if piece:
                part = tokenizer(piece, add_special_tokens=False)["input_ids"]
                ids += part
                owner += [who] * len(part)
        pos = end
    if text[pos:]:
        part = tokenizer(text[pos:], add_special_tokens=False)["input_ids"]
        ids += part
        owner += [-1] * len(part)
    return ids, owner


def encode(tokenizer, messages: list[dict], tools: Optional[list] = None, *, only_last: bool = False,
           **kw) -> Encoded:
    """Token ids and labels: each assistant reply (plus its end-of-turn marker) labelled, the rest -100.
    Replies with `loss: false` (ms-swift's per-turn field) stay unlabelled; `only_last` labels the last one."""
    text, spans = locate(tokenizer, messages, tools, **kw)
    train = [s for s in spans if messages[s.message].get("loss", True) is not False]
    if only_last:
        train = [s for s in spans if s.message == len(messages) - 1][-1:]
    ids, owner = token_spans(tokenizer, text, train)
    labels = [t if o >= 0 else IGNORE for t, o in zip(ids, owner)]
    replies = []
    for k in range(len(train)):
        where = [n for n, o in enumerate(owner) if o == k]
        if where:
            replies.append((where[0], where[-1] + 1))
    return Encoded(ids, labels, replies, _head_tokens(tokenizer, messages, text, ids, owner))


def _head_tokens(tokenizer, messages, text, ids, owner) -> int:
    """Tokens up to the end of the system prompt's text (0 without one): kept when a long row is cut."""
    if not messages or messages[0]["role"] != "system" or not messages[0].get("content"):
        return 0
    at = text.find(messages[0]["content"])
    if at < 0:
        return 0
    end = at + len(messages[0]["content"])
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return sum(1 for s, _ in enc["offset_mapping"] if s < end)
    return len(tokenizer(text[:end], add_special_tokens=False)["input_ids"])


def fit(enc: Encoded, max_length: int) -> tuple[Optional[Encoded], bool]:
    """Cut a row to `max_length` tokens: keep the system head and the last reply, drop prompt tokens from the
    left. Returns (row or None when the last reply alone cannot fit, truncated?)."""
    n = len(enc.input_ids)
    if n <= max_length:
        return enc, False
    if not enc.replies:
        return None, True
    r_start, r_end = enc.replies[-1]
    if r_end - r_start > max_length:
        return None, True
    head = enc.head if enc.head + (r_end - r_start) <= max_length else 0
    room = max_length - head
    end = n if n - r_start <= room else r_start + room
    cut = max(head, end - room)
    ids = enc.input_ids[:head] + enc.input_ids[cut:end]
    labels = enc.labels[:head] + enc.labels[cut:end]
    shift = head - cut
    replies = [(max(s + shift, head), e + shift) for s, e in enc.replies if e > cut and s < end]
    return Encoded(ids, labels, replies, head), True


def tokenize_sft(rows: list[dict], tokenizer, max_length: int) -> tuple[list[dict], Counts]:
    """{input_ids, labels} per conversation, fitted to `max_length`; the counts of truncated / dropped rows."""
    out, counts = [], Counts()
    for row in each(rows, "tokenizing SFT rows"):
        counts.rows += 1
        enc = encode(tokenizer, row["messages"], row.get("tools"), **switches(row))
        fitted, cut = fit(enc, max_length)
        counts.truncated += int(cut and fitted is not None)
        if fitted is None or all(lbl == IGNORE for lbl in fitted.labels[1:]):
            counts.dropped += 1
            continue
        out.append({"input_ids": fitted.input_ids, "labels": fitted.labels})
    return out, counts


# -- DPO -----------------------------------------------------------------------------------------------------
def completion_text(tokenizer, prompt: list[dict], side: list[dict], tools=None, **kw) -> str:
    """The reply as the template renders it after `prompt` (plus its end-of-turn marker)."""
    if any(m["role"] != "assistant" for m in side):
        raise UserError("a chosen/rejected completion must hold assistant turns only")
    text, spans = locate(tokenizer, prompt + side, tools, **kw)
    mine = [s for s in spans if s.message >= len(prompt)]
    if not mine:
        return ""
    return text[mine[0].start:mine[-1].end]


def dpo_strings(rows: list[dict], tokenizer, max_length: int) -> tuple[list[dict], Counts]:
    """{prompt, chosen, rejected} strings for TRL: prompt = the generation prompt the model sees at inference,
    chosen / rejected = only the replies. Long prompts lose tokens from the left (system prompt kept)."""
    out, counts = [], Counts()
    for row in each(rows, "tokenizing preference pairs"):
        split = prompt_and_replies(tokenizer, row, ("chosen", "rejected"), max_length, counts)
        if split is not None:
            out.append({"prompt": split[0], "chosen": split[1], "rejected": split[2]})
    return out, counts


def kto_strings(rows: list[dict], tokenizer, max_length: int) -> tuple[list[dict], Counts]:
    """{prompt, completion, label} strings for TRL's KTO, split exactly as `dpo_strings` splits a pair."""
    out, counts = [], Counts()
    for row in each(rows, "tokenizing KTO rows"):
        split = prompt_and_replies(tokenizer, row, ("completion",), max_length, counts)
        if split is not None:
            out.append({"prompt": split[0], "completion": split[1], "label": row["label"]})
    return out, counts


def prompt_and_replies(tokenizer, row: dict, sides: tuple[str, ...], max_length: int,
                       counts: Counts) -> Optional[list[str]]:
    """[prompt, reply per side] for one row (each reply as the template renders it after the prompt), the prompt
    cut from the left so that it and the longest reply fit `max_length`; None (counted as dropped) when a reply
    is empty or alone too long."""
    counts.rows += 1
    tools, kw = row.get("tools"), switches(row)
    prompt = render(tokenizer, row["prompt"], tools, generation_prompt=True, **kw)
    replies = [completion_text(tokenizer, row["prompt"], row[k], tools, **kw) for k in sides]
    if not all(any(p.strip() for m in row[k] for p in payload_texts(m)) for k in sides):
        counts.dropped += 1
        return None
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    longest = max(len(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in replies)
    if len(p_ids) + longest > max_length:
        if longest >= max_length:
            counts.dropped += 1
            return None
        head = _prompt_head(tokenizer, row["prompt"], prompt, p_ids)
        if head + longest >= max_length:
            head = 0
        keep = max_length - longest - head
        prompt = tokenizer.decode(p_ids[:head] + p_ids[len(p_ids) - keep:])
        counts.truncated += 1
    return [prompt, *replies]


def preference_ids(tokenizer, example: dict, sides: tuple[str, ...]) -> dict:
    """Token ids of one split row for TRL's preference trainers: `prompt_ids` (the generation prompt) and
    `<side>_ids` per reply, each tokenized on its own without added special tokens - the prompt exactly as the
    model reads it at inference, each reply exactly as the template renders it (its end-of-turn marker, nothing
    appended)."""
    out = {"prompt_ids": tokenizer(example["prompt"], add_special_tokens=False)["input_ids"]}
    for side in sides:
        out[f"{side}_ids"] = tokenizer(example[side], add_special_tokens=False)["input_ids"]
    return out


def _prompt_head(tokenizer, messages, text, ids) -> int:
    if not messages or messages[0]["role"] != "system":
        return 0
    at = text.find(messages[0].get("content") or "\0")
    if at < 0:
        return 0
    return len(tokenizer(text[:at + len(messages[0]["content"])], add_special_tokens=False)["input_ids"])


# -- GRPO ----------------------------------------------------------------------------------------------------
def grpo_prompts(rows: list[dict], tokenizer, max_length: int) -> tuple[list[dict], Counts]:
    """{prompt, solution} for TRL's GRPOTrainer: prompt = the conversation rendered with the template's generation
    prompt (what the model sees at inference), solution = the reference answer (None when the row has none).
    Prompts longer than `max_length` tokens lose tokens from the left (system prompt kept)."""
    out, counts = [], Counts()
    for row in each(rows, "rendering GRPO prompts"):
        counts.rows += 1
        prompt = render(tokenizer, row["prompt"], row.get("tools"), generation_prompt=True, **switches(row))
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if len(ids) > max_length:
            head = _prompt_head(tokenizer, row["prompt"], prompt, ids)
            head = head if head < max_length // 2 else 0
            prompt = tokenizer.decode(ids[:head] + ids[len(ids) - (max_length - head):])
            counts.truncated += 1
        out.append({"prompt": prompt, "solution": row["reference"]})
    return out, counts

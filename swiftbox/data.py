"""Datasets: read jsonl / json / parquet files (or several, with `path#N` sampling) and normalise the
common row formats into chat messages, then tokenize them with the tokenizer's own chat template.

SFT rows -> {"messages": [...]}. Accepted: `messages` (OpenAI), ShareGPT (`conversations` with
`from`/`value`, optional `system`), alpaca (`instruction`/`input`/`output`, optional `system`/`history`),
`query`/`response` (optional `system`/`history`).
DPO rows -> {"prompt": [messages], "chosen": [assistant msg], "rejected": [assistant msg]}. Accepted:
`prompt`/`chosen`/`rejected` (strings or message lists), `messages` + `rejected_response`, alpaca-style
`instruction`/`input` (or `query`) with `chosen`/`rejected`.
Eval rows -> (prompt messages, reference answer): any SFT format; the last assistant turn is the reference.

A file whose rows fit no format is a UserError naming the file, the columns found and the formats accepted.
Nothing here imports torch; tokenization needs only the tokenizer object.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from swiftbox.errors import UserError

SFT_FORMATS = ("messages", "conversations/from/value (ShareGPT)", "instruction/input/output (alpaca)", "query/response")
DPO_FORMATS = ("prompt/chosen/rejected", "messages + rejected_response", "instruction/input/chosen/rejected (alpaca)")
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
                  "bot": "assistant", "system": "system", "tool": "tool", "function": "tool", "observation": "tool"}
ROLES = ("system", "user", "assistant", "tool")


# -- reading files -------------------------------------------------------------------------------
def split_spec(spec: str) -> tuple[Path, Optional[int]]:
    """'data.jsonl#200' -> (Path('data.jsonl'), 200); no '#N' -> (path, None)."""
    path, count = spec, None
    if "#" in spec:
        path, _, tail = spec.rpartition("#")
        if not tail.isdigit() or int(tail) < 1:
            raise UserError(f"dataset {spec!r}: expected PATH#N with N a positive integer")
        count = int(tail)
    return Path(path).expanduser(), count


def read_file(path: Path) -> list[dict]:
    """Rows of one jsonl / json / parquet file as dicts."""
    if not path.is_file():
        raise UserError(f"dataset {path}: file not found; expected a .jsonl, .json or .parquet file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - any reader failure is bad input
            raise UserError(f"dataset {path}: unreadable parquet ({str(exc).splitlines()[0]})") from None
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise UserError(f"dataset {path}: not a UTF-8 text file") from None
        rows = _parse_json_text(path, text)
    if not rows:
        raise UserError(f"dataset {path}: holds no rows")
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise UserError(f"dataset {path}: row {i} is a {type(row).__name__}, expected a JSON object")
    return rows


def _parse_json_text(path: Path, text: str) -> list:
    stripped = text.lstrip()
    if path.suffix.lower() == ".json" and stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"dataset {path}: invalid JSON at line {exc.lineno} ({exc.msg})") from None
        return data
    rows = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise UserError(f"dataset {path}: line {no} is not valid JSON ({exc.msg})") from None
    return rows


def read_rows(dataset: Union[str, list[str]], seed: int = 42) -> list[tuple[Path, dict]]:
    """All rows of `dataset` (one spec or a list), each with the file it came from. 'path#N' samples N rows
    (with repetition when N exceeds the file), deterministically from `seed`."""
    specs = [dataset] if isinstance(dataset, str) else list(dataset)
    if not specs:
        raise UserError("dataset: expected a path or a list of paths, got an empty list")
    out: list[tuple[Path, dict]] = []
    rng = random.Random(seed)
    for spec in specs:
        if not isinstance(spec, str):
            raise UserError(f"dataset: expected a path string, got {spec!r}")
        path, count = split_spec(spec)
        rows = read_file(path)
        if count is not None:
            picked = rows * (count // len(rows)) + rng.sample(rows, count % len(rows))
            rows = picked if count >= len(rows) else rng.sample(rows, count)
        out += [(path, row) for row in rows]
    return out


# -- normalising rows ----------------------------------------------------------------------------
class _Skip(Exception):
    """This row does not fit the format being tried."""


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _history(row: dict) -> list[dict]:
    out = []
    for pair in row.get("history") or []:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError("history must be a list of [question, answer] pairs")
        out += [{"role": "user", "content": _text(pair[0], "history question")},
                {"role": "assistant", "content": _text(pair[1], "history answer")}]
    return out


def _system(row: dict) -> list[dict]:
    system = row.get("system")
    return [{"role": "system", "content": _text(system, "system")}] if system else []


def _messages(value, what: str = "messages") -> list[dict]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{what} must be a non-empty list of {{role, content}} objects")
    out = []
    for m in value:
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"each of {what} needs 'role' and 'content'")
        if m["role"] not in ROLES:
            raise ValueError(f"unknown role {m['role']!r} in {what}; expected one of {', '.join(ROLES)}")
        out.append({"role": m["role"], "content": _text(m["content"], f"{what} content")})
    return out


def _sharegpt(row: dict) -> list[dict]:
    convo = row["conversations"]
    if not isinstance(convo, list) or not convo:
        raise ValueError("conversations must be a non-empty list of {from, value} objects")
    out = _system(row)
    for turn in convo:
        if not isinstance(turn, dict) or "from" not in turn or "value" not in turn:
            raise ValueError("each conversations turn needs 'from' and 'value'")
        role = SHAREGPT_ROLES.get(str(turn["from"]).lower())
        if role is None:
            raise ValueError(f"unknown speaker {turn['from']!r}; expected one of {', '.join(SHAREGPT_ROLES)}")
        out.append({"role": role, "content": _text(turn["value"], "conversations value")})
    return out


def _question(row: dict) -> str:
    """The user turn of an alpaca / query-style row: instruction + optional input, or query."""
    if "instruction" in row:
        question = _text(row["instruction"], "instruction")
        extra = row.get("input")
        return f"{question}\n{_text(extra, 'input')}" if extra else question
    return _text(row["query"], "query")


def sft_messages(row: dict) -> list[dict]:
    """One SFT row in any accepted format -> chat messages ending with an assistant turn."""
    keys = row.keys()
    if "messages" in keys:
        msgs = _system(row) + _messages(row["messages"])
    elif "conversations" in keys:
        msgs = _sharegpt(row)
    elif "instruction" in keys and "output" in keys:
        msgs = _system(row) + _history(row) + [{"role": "user", "content": _question(row)},
                                              {"role": "assistant", "content": _text(row["output"], "output")}]
    elif "query" in keys and "response" in keys:
        msgs = _system(row) + _history(row) + [{"role": "user", "content": _question(row)},
                                              {"role": "assistant", "content": _text(row["response"], "response")}]
    else:
        raise _Skip
    if msgs[-1]["role"] != "assistant":
        raise ValueError("the conversation must end with an assistant turn")
    return msgs


def _completion(value, what: str) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    msgs = _messages(value, what)
    if msgs[-1]["role"] != "assistant":
        raise ValueError(f"{what} must end with an assistant turn")
    return msgs


def dpo_triple(row: dict) -> dict:
    """One preference row in any accepted format -> {prompt, chosen, rejected} as message lists."""
    keys = row.keys()
    if "chosen" in keys and "rejected" in keys and "prompt" in keys:
        prompt = row["prompt"]
        prompt = ([{"role": "user", "content": prompt}] if isinstance(prompt, str) else _messages(prompt, "prompt"))
        prompt = _system(row) + prompt if not any(m["role"] == "system" for m in prompt) else prompt
    elif "messages" in keys and "rejected_response" in keys:
        msgs = _system(row) + _messages(row["messages"])
        if msgs[-1]["role"] != "assistant":
            raise ValueError("messages must end with the chosen assistant turn")
        return {"prompt": msgs[:-1], "chosen": [msgs[-1]],
                "rejected": _completion(row["rejected_response"], "rejected_response")}
    elif "chosen" in keys and "rejected" in keys and ("instruction" in keys or "query" in keys):
        prompt = _system(row) + _history(row) + [{"role": "user", "content": _question(row)}]
    else:
        raise _Skip
    return {"prompt": prompt, "chosen": _completion(row["chosen"], "chosen"),
            "rejected": _completion(row["rejected"], "rejected")}


def _normalise(rows: list[tuple[Path, dict]], convert, formats: Iterable[str], kind: str) -> list:
    out: list = []
    line_of: dict[Any, int] = {}
    for path, row in rows:
        line_of[path] = line_of.get(path, 0) + 1
        try:
            out.append(convert(row))
        except _Skip:
            raise UserError(f"dataset {path}: columns {sorted(row)} (row {line_of[path]}) fit no {kind} format; "
                            f"expected one of: {' | '.join(formats)}") from None
        except (ValueError, TypeError, KeyError) as exc:
            raise UserError(f"dataset {path}: row {line_of[path]}: {exc}") from None
    return out


def load_sft(dataset: Union[str, list[str]], seed: int = 42) -> list[dict]:
    return [{"messages": m} for m in _normalise(read_rows(dataset, seed), sft_messages, SFT_FORMATS, "SFT")]


def load_dpo(dataset: Union[str, list[str]], seed: int = 42) -> list[dict]:
    return _normalise(read_rows(dataset, seed), dpo_triple, DPO_FORMATS, "DPO")


def load_eval(dataset: Union[str, list[str]], limit: Optional[int] = None) -> list[tuple[list[dict], str]]:
    """(prompt messages, reference) pairs: prompt = all but the last assistant turn."""
    rows = read_rows(dataset)
    if limit:
        rows = rows[:limit]
    return [(m[:-1], m[-1]["content"]) for m in _normalise(rows, sft_messages, SFT_FORMATS, "eval")]


def load_texts(path: Union[str, Path]) -> list[str]:
    """Texts for perplexity: a .txt file (paragraphs) or rows with `text` (else rendered as plain turns)."""
    path = Path(path).expanduser()
    if path.suffix.lower() == ".txt":
        if not path.is_file():
            raise UserError(f"perplexity {path}: file not found; expected a .txt, .jsonl, .json or .parquet file")
        texts = [p.strip() for p in path.read_text(encoding="utf-8", errors="replace").split("\n\n") if p.strip()]
        if not texts:
            raise UserError(f"perplexity {path}: holds no text")
        return texts
    out = []
    for p, row in read_rows(str(path)):
        if isinstance(row.get("text"), str):
            out.append(row["text"])
            continue
        try:
            out.append("\n".join(m["content"] for m in sft_messages(row)))
        except (_Skip, ValueError, TypeError, KeyError):
            raise UserError(f"perplexity {p}: columns {sorted(row)} hold no text; expected text or one of: "
                            f"{' | '.join(SFT_FORMATS)}") from None
    return out


# -- tokenizing ----------------------------------------------------------------------------------
def tokenize_sft(rows: list[dict], tokenizer, max_length: int) -> tuple[list[dict], int]:
    """Chat-template each conversation; labels are the assistant tokens only (-100 elsewhere), truncated to
    `max_length`. Rows left with no assistant token are dropped; returns (rows, dropped)."""
    out, dropped = [], 0
    for row in rows:
        enc = tokenizer.apply_chat_template(row["messages"], tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
        ids = list(enc["input_ids"])[:max_length]
        mask = list(enc.get("assistant_masks") or [])[:max_length]
        if not mask or not any(mask):
            mask = _assistant_mask_by_prefix(row["messages"], tokenizer)[:max_length]
        labels = [t if m else -100 for t, m in zip(ids, mask)]
        if all(lbl == -100 for lbl in labels[1:]):
            dropped += 1
            continue
        out.append({"input_ids": ids, "labels": labels})
    return out, dropped


def _assistant_mask_by_prefix(messages: list[dict], tokenizer) -> list[int]:
    """Assistant mask for templates without {% generation %} markers: tokens added by each assistant turn."""
    mask: list[int] = []
    for i, msg in enumerate(messages):
        prefix = tokenizer.apply_chat_template(messages[: i + 1], tokenize=True, add_generation_prompt=False)
        if msg["role"] == "assistant":
            head = tokenizer.apply_chat_template(messages[:i], tokenize=True, add_generation_prompt=True) if i else []
            head_len = len(_ids(head))
            mask += [0] * (head_len - len(mask))
        mask += [1 if msg["role"] == "assistant" else 0] * (len(_ids(prefix)) - len(mask))
    return mask


def _ids(enc) -> list[int]:
    return list(enc["input_ids"]) if isinstance(enc, dict) or hasattr(enc, "keys") else list(enc)


def drop_truncated_pairs(rows: list[dict], tokenizer, max_length: int) -> tuple[list[dict], int]:
    """Drop preference rows whose chosen or rejected answer keeps no token once prompt+answer is cut to
    `max_length` (their log-probability would be empty and the DPO loss NaN). Returns (kept, dropped)."""
    kept, dropped = [], 0
    for row in rows:
        prompt = len(_ids(tokenizer.apply_chat_template(row["prompt"], tokenize=True, add_generation_prompt=True)))
        ok = True
        for side in ("chosen", "rejected"):
            full = len(_ids(tokenizer.apply_chat_template(row["prompt"] + row[side], tokenize=True)))
            answer = min(full, max_length) - prompt
            if answer <= 0 or not "".join(m["content"] for m in row[side]).strip():
                ok = False
        if ok:
            kept.append(row)
        else:
            dropped += 1
    return kept, dropped

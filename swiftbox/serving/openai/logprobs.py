"""Token logprobs in OpenAI's shapes (chat and text completions), whole or per stream chunk."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:
    from swiftbox.serving.events import TokenLogprob

FLOOR = -9999.0
# (token id, (chosen logprob, [(top id, top logprob), ...])) per generated token
Entry = tuple[int, tuple[float, list[tuple[int, float]]]]
PromptEntry = tuple[int, Optional[tuple[float, list[tuple[int, float]]]]]   # an echoed prompt's first: (id, None)


class LogprobFormatter:
    """Token logprobs in OpenAI's shapes: chat `{"content": [{token, logprob, bytes, top_logprobs}], "refusal"}`,
    text completions `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`; whole or per stream chunk.
    A token's text is its own decoding (a byte that is part of a longer character decodes to U+FFFD, as in vLLM);
    vLLM's `return_tokens_as_token_ids` gives "token_id:N" instead. Values are floored at -9999.0 (JSON has no
    -inf)."""

    def __init__(self, tokenizer: Any, as_ids: bool = False):
        self.tokenizer, self.as_ids = tokenizer, as_ids
        self._texts: dict[int, str] = {}

    def text(self, token: int) -> str:
        if self.as_ids:
            return f"token_id:{token}"
        found = self._texts.get(token)
        if found is None:
            found = self._texts[token] = self.tokenizer.decode([token])
        return found

    def chat(self, entries: list[Entry]) -> Optional[dict]:
        return chat_logprobs(self.events(0, entries))

    def events(self, index: int, entries: Sequence[Entry]) -> list[TokenLogprob]:
        """Choice `index`'s generated tokens as typed events (events.py), their texts decoded here."""
        from swiftbox.serving.events import TokenLogprob

        return [TokenLogprob(index, self.text(token), lp, tuple((self.text(t), v) for t, v in top))
                for token, (lp, top) in entries]

    def completion(self, entries: Sequence[PromptEntry], offset: int) -> tuple[Optional[dict], int]:
        """The legacy shape, as vLLM writes it, and the text offset after these tokens (each token's offset is
        `offset` plus the lengths of the token texts before it in this call). `top_logprobs` holds the token itself
        and the `logprobs` most likely (up to logprobs + 1 entries, as OpenAI documents). An echoed prompt's first
        token has no logprob: its entry is (id, None) and its logprob and top_logprobs are null."""
        if not entries:
            return None, offset
        tokens: list[str] = []
        values: list[Optional[float]] = []
        tops: list[Optional[dict[str, float]]] = []
        offsets: list[int] = []
        for token, found in entries:
            text = self.text(token)
            tokens.append(text)
            if found is None:
                values.append(None)
                tops.append(None)
            else:
                lp, top = found
                values.append(max(lp, FLOOR))
                tops.append({text: max(lp, FLOOR), **{self.text(t): max(v, FLOOR) for t, v in top}})
            offsets.append(offset)
            offset += len(text)
        return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}, offset


def _item(text: str, logprob: float) -> dict:
    return {"token": text, "logprob": max(logprob, FLOOR), "bytes": list(text.encode("utf-8"))}


def chat_logprobs(tokens: Sequence[TokenLogprob]) -> Optional[dict]:
    """The chat shape of these tokens' logprobs (None: no token)."""
    if not tokens:
        return None
    content = [{**_item(t.token, t.logprob), "top_logprobs": [_item(text, v) for text, v in t.top]} for t in tokens]
    return {"content": content, "refusal": None}

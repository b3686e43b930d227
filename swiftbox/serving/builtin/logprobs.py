"""Token logprobs in OpenAI's response shapes (the engine computes them: sampling.token_logprobs).

Chat completions: `choices[i].logprobs = {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...],
"refusal": None}`; text completions: `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`. Both
streamed (the tokens behind each chunk's text) and whole. A token's text is its own decoding (a byte that
is part of a longer character decodes to U+FFFD, as in vLLM); vLLM's `return_tokens_as_token_ids` gives
"token_id:N" instead. Values are floored at -9999.0 (JSON has no -inf).
"""
from __future__ import annotations

from typing import Optional

FLOOR = -9999.0

# (token id, (chosen logprob, [(top id, top logprob), ...])) per generated token
Entry = tuple[int, tuple[float, list[tuple[int, float]]]]


class Formatter:
    def __init__(self, tokenizer, as_ids: bool = False):
        self.tokenizer, self.as_ids = tokenizer, as_ids
        self._texts: dict[int, str] = {}

    def text(self, token: int) -> str:
        if self.as_ids:
            return f"token_id:{token}"
        found = self._texts.get(token)
        if found is None:
            found = self._texts[token] = self.tokenizer.decode([token])
        return found

    def _item(self, token: int, logprob: float) -> dict:
        text = self.text(token)
        return {"token": text, "logprob": max(logprob, FLOOR), "bytes": list(text.encode("utf-8"))}

    def chat(self, entries: list[Entry]) -> Optional[dict]:
        if not entries:
            return None
        content = [{**self._item(token, lp), "top_logprobs": [self._item(t, v) for t, v in top]}
                   for token, (lp, top) in entries]
        return {"content": content, "refusal": None}

    def completion(self, entries: list[Entry], offset: int) -> tuple[Optional[dict], int]:
        """The legacy shape, and the text offset after these tokens (offsets count characters of the answer,
        starting at `offset`: the echoed prompt's length, or where the previous chunk ended)."""
        if not entries:
            return None, offset
        tokens, values, tops, offsets = [], [], [], []
        for token, (lp, top) in entries:
            text = self.text(token)
            tokens.append(text)
            values.append(max(lp, FLOOR))
            tops.append({self.text(t): max(v, FLOOR) for t, v in top})
            offsets.append(offset)
            offset += len(text)
        return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}, offset

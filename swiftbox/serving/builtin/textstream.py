"""Token ids -> text deltas for one sequence: incremental detokenization and stop strings.

Text that could still be the start of a stop string is held back, so a stop string never leaks into
a stream; a partial UTF-8 character (decoded as U+FFFD) waits for its next byte. Special tokens
are dropped, unless the request's answer parser needs them (`keep_special`: tool-call and reasoning markers such as
gpt-oss's `<|channel|>` or DeepSeek's tool-call tokens are special; serving/toolformats hides them
from content). Detokenizing is
incremental (the prefix/read offsets of TGI and vLLM): each token decodes a short window of ids, not the
whole answer again, so the cost per token does not grow with the answer.
"""
from __future__ import annotations


class TextStream:
    def __init__(self, tokenizer, stops: list[str]):
        self.tokenizer, self.stops = tokenizer, list(stops)
        self.ids: list[int] = []
        self.text = ""
        self.sent = 0
        self.stopped = False
        self.matched: str | None = None     # the stop string that ended the text (vLLM's stop_reason)
        self.keep_special = False   # True: special tokens stay in the text (an answer parser reads, then hides them)
        self._longest = max((len(s) for s in self.stops), default=0)
        self._prefix = 0            # ids[_prefix:_read] decode to the text just before the newest piece
        self._read = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=not self.keep_special)

    def add(self, token: int) -> str:
        """Feed one token; returns the text that may be sent now (maybe '')."""
        if self.stopped:
            return ""
        self.ids.append(token)
        before = self._decode(self.ids[self._prefix:self._read])
        after = self._decode(self.ids[self._prefix:])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        text = self.text + after[len(before):]
        self._prefix, self._read = self._read, len(self.ids)
        self.text = text
        if self.stops:
            start = max(0, self.sent - self._longest)
            hits = [(i, s) for i, s in ((text.find(s, start), s) for s in self.stops) if i >= 0]
            if hits:
                self.stopped = True
                at, self.matched = min(hits, key=lambda hit: hit[0])
                self.text = text[:at]
                return self._take(len(self.text))
            return self._take(len(text) - self._held(text))
        return self._take(len(text))

    def flush(self) -> str:
        """At the end of the sequence: whatever was held back."""
        if not self.stopped:
            full = self._decode(self.ids)
            if len(full) >= len(self.text) and full.startswith(self.text[:self.sent]):
                self.text = full
        return self._take(len(self.text))

    def _held(self, text: str) -> int:
        for n in range(min(self._longest - 1, len(text)), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self.stops):
                return n
        return 0

    def _take(self, upto: int) -> str:
        upto = max(upto, self.sent)
        out = self.text[self.sent:upto]
        self.sent = upto
        return out

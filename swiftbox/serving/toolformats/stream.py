"""Reading an answer as it streams: reasoning, content and tool calls, one piece at a time, for every ToolFormat.

The buffering rule (the same text gives the same result whole or token by token: the whole answer is one `feed`):
- a reasoning block ends at its close, or at a tool call's opener (calls are answers, never reasoning: a model
  trained without reasoning writes its call right after a prompt that opened the block, as DeepSeek-R1's does);
- reasoning and content go out as they arrive, minus any tail that could still be the start of a marker (a tool
  call's opener, the reasoning block's close, a special token) - held until the next text settles it;
- leading whitespace of each is dropped, trailing whitespace held until more text follows (the stripped result);
- from a tool call's opener on (anywhere, or a `leading` opener at the very start of the answer) the rest is held and
  read when the answer ends: the calls go out then, each as (`call`, OpenAI tool call); text the format does not read
  as calls goes out as content then (a malformed call stays plain text);
- special tokens (the tokenizer's, decoded so the formats can see them) never reach reasoning or content.
Events: ("reasoning", text), ("text", text), ("call", {id, type, function: {name, arguments}}).
"""
from __future__ import annotations

from typing import Iterable, Optional

from swiftbox.serving.toolformats.base import ToolFormat, Tools
from swiftbox.serving.toolformats.hermes import HERMES
from swiftbox.serving.toolformats.reasoning import Reasoning

Event = tuple[str, object]


def prefixes(markers: Iterable[str]) -> frozenset[str]:
    """Every proper prefix of every marker: a text ending in one of these may be the start of that marker."""
    return frozenset(m[:n] for m in markers if m for n in range(1, len(m)))


def held(text: str, starts: frozenset[str], longest: int) -> int:
    """How many characters at the end of `text` could begin a marker (checked longest first)."""
    for n in range(min(longest, len(text)), 0, -1):
        if text[-n:] in starts:
            return n
    return 0


class Out:
    """Reasoning / content pieces as they may be sent: special tokens removed, outer whitespace stripped."""

    def __init__(self, hidden: tuple[str, ...]):
        self.hidden = hidden
        self.firsts = frozenset(t[0] for t in hidden if t)   # a piece without any of these holds no special token
        self.started: dict[str, bool] = {}
        self.space: dict[str, str] = {}

    def put(self, kind: str, text: str) -> list[Event]:
        if not self.firsts.isdisjoint(text):
            for token in self.hidden:
                if token in text:
                    text = text.replace(token, "")
        if not self.started.get(kind):
            text = text.lstrip()
            if not text:
                return []
            self.started[kind] = True
        text = self.space.get(kind, "") + text
        body = text.rstrip()
        self.space[kind] = text[len(body):]
        return [(kind, body)] if body else []


class StreamParser:
    """One answer's reader: `feed(text)` as tokens decode, `finish()` at its end; both return events."""

    def __init__(self, fmt: Optional[ToolFormat], reasoning: Optional[Reasoning], *, tools: Optional[Tools] = None,
                 opened: bool = False, hidden: Iterable[str] = ()):
        self.fmt, self.reasoning, self.tools = fmt, reasoning, tools or {}
        self.hidden = tuple(h for h in dict.fromkeys(hidden) if h)
        self.out = Out(self.hidden)
        self.state = "content" if reasoning is None else ("reasoning" if opened else "start")
        self.pending = ""
        self.region: list[str] = []
        self.content_seen = False
        self.openers: tuple[str, ...] = ()
        self.leading: tuple[str, ...] = ()
        if fmt is not None:
            self.openers = tuple(dict.fromkeys(fmt.openers + HERMES.openers))
            self.leading = fmt.leading_for(self.tools)
        content_marks = self.openers + self.hidden
        self._content = (prefixes(content_marks), max(map(len, content_marks), default=0))
        thought_marks = ((reasoning.close,) if reasoning else ()) + self.openers + self.hidden
        self._thought = (prefixes(thought_marks), max(map(len, thought_marks), default=0))

    def feed(self, text: str) -> list[Event]:
        self.pending += text
        return self._run(final=False)

    def finish(self) -> list[Event]:
        events = self._run(final=True)
        if self.state != "calls":
            return events
        region = "".join(self.region)
        self.region = []
        found = self.fmt.split(region, self.tools) if self.fmt else None
        trimmed = self._trimmed(region) if found is None else region
        if trimmed != region and self.fmt is not None:
            region, found = trimmed, self.fmt.split(trimmed, self.tools)
        if found is None and self.fmt is not HERMES and HERMES.openers[0] in region:
            found = HERMES.split(region, self.tools)     # swiftbox's default tool format (data/dialect.py)
        if found is None:
            return events + self.out.put("text", region)
        rest, calls = found
        return events + self.out.put("text", rest) + [("call", c) for c in calls]

    def _trimmed(self, region: str) -> str:
        """The held region without the special tokens that end it (an end of turn the engine let through; tried
        when the region as it is holds no call: some formats end in special tokens of their own)."""
        while True:
            body = region.rstrip()
            token = next((h for h in self.hidden if body.endswith(h)), None)
            if token is None:
                return region
            region = body[:len(body) - len(token)]

    def _emit_safe(self, kind: str, final: bool, marks: tuple[frozenset[str], int]) -> list[Event]:
        keep = 0 if final else held(self.pending, *marks)
        text, self.pending = self.pending[:len(self.pending) - keep], self.pending[len(self.pending) - keep:]
        if kind == "text" and text.strip():
            self.content_seen = True
        return self.out.put(kind, text) if text else []

    def _run(self, final: bool) -> list[Event]:
        events: list[Event] = []
        r = self.reasoning
        while True:
            if self.state == "start" and r is not None:
                s = self.pending.lstrip()
                if s.startswith(r.open):
                    self.pending, self.state = s[len(r.open):], "reasoning"
                    continue
                if (not s or r.open.startswith(s)) and not final:
                    return events
                self.state = "content"
                continue
            if self.state == "reasoning" and r is not None:
                at = self.pending.find(r.close)
                call_at = min((i for i in (self.pending.find(o) for o in self.openers) if i >= 0), default=-1)
                if call_at >= 0 and (at < 0 or call_at < at):     # a call ends an open block: calls are answers
                    events += self.out.put("reasoning", self.pending[:call_at])
                    self.pending, self.state = self.pending[call_at:], "content"
                    continue
                if at >= 0:
                    events += self.out.put("reasoning", self.pending[:at])
                    self.pending, self.state = self.pending[at + len(r.close):], "content"
                    continue
                return events + self._emit_safe("reasoning", final, self._thought)
            if self.state == "content":
                if self.fmt is not None:
                    if not self.content_seen and self.leading:
                        s = self.pending.lstrip()
                        if any(s.startswith(lead) for lead in self.leading):
                            self.region, self.pending, self.state = [s], "", "calls"
                            continue
                        if (not s or any(lead.startswith(s) for lead in self.leading)) and not final:
                            return events
                    hits = [i for i in (self.pending.find(o) for o in self.openers) if i >= 0]
                    if hits:
                        at = min(hits)
                        if self.pending[:at]:
                            events += self.out.put("text", self.pending[:at])
                        self.region, self.pending, self.state = [self.pending[at:]], "", "calls"
                        continue
                return events + self._emit_safe("text", final, self._content)
            # calls: everything is held until the answer ends
            if self.pending:
                self.region.append(self.pending)
                self.pending = ""
            return events

"""gpt-oss's harmony messages (vLLM's `openai` tool parser and `openai_gptoss` reasoning parser). After the
generation prompt's `<|start|>assistant` the model writes one or more messages,

    <|channel|>analysis<|message|>I should look it up.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}
    <|call|>      (one line: no newlines between the tokens)
    <|channel|>final<|message|>It is 21 degrees.<|return|>

(the chat template renders a call's header as ` to=functions.get_weather<|channel|>commentary json<|message|>`: the
recipient may come before or after the channel). analysis is reasoning, final (and commentary addressed to no one,
a preamble) is content, a message to `functions.NAME` is a tool call whose body is its JSON arguments. Streamed
message by message: a header is held until its `<|message|>`, a body goes out as it arrives (a call's when it ends).
An answer that does not start like a harmony message is plain content.
"""
from __future__ import annotations

from typing import Iterable, Optional

from swiftbox.serving.toolformats.base import MALFORMED, Split, ToolFormat, Tools, call, loads
from swiftbox.serving.toolformats.stream import Event, Out, held, prefixes

CHANNEL, MESSAGE, START, CONSTRAIN = "<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
HEADS = (CHANNEL, START, " to=", "to=", CONSTRAIN)


def header(text: str) -> tuple[str, Optional[str]]:
    """(channel, recipient) of a message header: `<|start|>assistant<|channel|>commentary to=functions.f json`."""
    channel, recipient = "", None
    at = text.find(CHANNEL)
    if at >= 0:
        channel = text[at + len(CHANNEL):].replace("<|", " <|").split()[0] if text[at + len(CHANNEL):].strip() else ""
    to = text.find("to=")
    if to >= 0:
        recipient = text[to + 3:].replace("<|", " <|").split()[0] if text[to + 3:].strip() else None
    return channel, recipient


class HarmonyParser:
    """The harmony reader with the StreamParser's interface (feed / finish -> events)."""

    def __init__(self, *, tools: Optional[Tools] = None, hidden: Iterable[str] = (), calls: bool = True):
        self.tools, self.calls = tools or {}, calls
        self.hidden = tuple(h for h in dict.fromkeys(hidden) if h)
        self.out = Out(self.hidden)
        self.state = "header"           # header | body | plain
        self.pending = ""
        self.kind = "text"              # the open body's: reasoning | text | call
        self.name = ""
        self.body: list[str] = []
        body_marks = ENDS + self.hidden
        self._body = (prefixes(body_marks), max(map(len, body_marks), default=0))
        plain_marks = self.hidden
        self._plain = (prefixes(plain_marks), max(map(len, plain_marks), default=0))

    def feed(self, text: str) -> list[Event]:
        self.pending += text
        return self._run(final=False)

    def finish(self) -> list[Event]:
        events = self._run(final=True)
        if self.state == "body":
            events += self._close()
        elif self.state == "header" and self.pending.strip():
            events += self.out.put("text", self.pending)
        self.pending = ""
        return events

    def _close(self) -> list[Event]:
        if self.kind != "call":
            return []
        text = "".join(self.body)
        self.body = []
        args = loads(text.strip() or "{}")
        found = call(self.name, args) if args is not MALFORMED else None
        return [("call", found)] if found else self.out.put("text", text)

    def _run(self, final: bool) -> list[Event]:
        """One forward pass over what is pending: a cursor, and each marker's next position found once (a marker
        that is absent is not searched again), so a long answer of many messages reads in linear time."""
        events: list[Event] = []
        text, at = self.pending, 0
        found: dict[str, int] = {}

        def next_at(marker: str) -> int:
            pos = found.get(marker)
            if pos is None or (0 <= pos < at):
                pos = found[marker] = text.find(marker, at)
            return pos

        while True:
            if self.state == "plain":
                keep = 0 if final else held(text[at:], *self._plain)
                piece, at = text[at:len(text) - keep], len(text) - keep
                events += self.out.put("text", piece) if piece else []
                break
            if self.state == "header":
                lead = at
                while lead < len(text) and text[lead] in " \t\r\n":
                    lead += 1
                rest = len(text) - lead
                if rest and not any(text.startswith(h, lead) or (rest < len(h) and h.startswith(text[lead:]))
                                    for h in HEADS):
                    self.state = "plain"       # not harmony: plain content
                    continue
                end = next_at(MESSAGE)
                if end < 0:
                    break
                channel, recipient = header(text[at:end])
                at, self.state = end + len(MESSAGE), "body"
                if recipient and recipient.startswith("functions.") and self.calls:
                    self.kind, self.name = "call", recipient[len("functions."):]
                else:
                    self.kind = "reasoning" if channel == "analysis" else "text"
                continue
            # body
            hits = [(pos, e) for e, pos in ((e, next_at(e)) for e in ENDS) if pos >= 0]
            if hits:
                pos, end_marker = min(hits)
                events += self._piece(text[at:pos])
                at, self.state = pos + len(end_marker), "header"
                events += self._close()
                continue
            keep = 0 if final else held(text[at:], *self._body)
            events += self._piece(text[at:len(text) - keep])
            at = len(text) - keep
            break
        self.pending = text[at:]
        return events

    def _piece(self, text: str) -> list[Event]:
        if not text:
            return []
        if self.kind == "call":
            self.body.append(text)
            return []
        return self.out.put(self.kind, text)


def _split(text: str, tools: Tools) -> Optional[Split]:
    """Whole-answer form (the stream parser does the work)."""
    parser = HarmonyParser(tools=tools)
    events = parser.feed(text) + parser.finish()
    calls = [v for k, v in events if k == "call" and isinstance(v, dict)]
    return ("".join(str(v) for k, v in events if k == "text"), calls) if calls else None


HARMONY = ToolFormat("harmony", ("openai",), (CHANNEL,), _split,
                     lambda template: CHANNEL in template and MESSAGE in template,
                     example=' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>')

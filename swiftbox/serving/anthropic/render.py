"""The bodies of Anthropic Messages (/v1/messages): the whole message and its SSE event sequence, built from the
chat answer (an Output whole, or the typed engine events streamed: events.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from swiftbox.serving.protocol import Usage
from swiftbox.serving.render import named_event, uid

if TYPE_CHECKING:
    from swiftbox.serving.answer import Output
    from swiftbox.serving.events import Event

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _input(value: str) -> Any:
    import json

    try:
        return json.loads(value or "{}")
    except ValueError:
        return {}


class MessagesBuilder:
    """The bodies of one /v1/messages request: the whole message, or its event sequence (message_start,
    content_block_start/delta/stop per block, message_delta with stop_reason and usage, message_stop)."""

    def __init__(self, model: str):
        self.id, self.model = uid("msg"), model
        self.index = -1              # the open block's index (streaming)
        self.open: Optional[str] = None
        self.tools: dict[int, int] = {}  # chat tool index -> block index
        self.reason: Optional[str] = None
        self.stop_sequence: Optional[str] = None     # the stop sequence that ended the answer (streaming)

    def _message(self, content: list[dict], stop: Optional[str], u: Usage,
                 sequence: Optional[str] = None) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": stop, "stop_sequence": sequence,
                "usage": {"input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens}}

    def message(self, o: Output, u: Usage) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if o.reasoning:
            content.append({"type": "thinking", "thinking": o.reasoning, "signature": ""})
        if o.text:
            content.append({"type": "text", "text": o.text})
        for c in o.tool_calls:
            content.append({"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                            "input": _input(c["function"]["arguments"])})
        if isinstance(o.stop_reason, str) and o.finish_reason == "stop":
            return self._message(content, "stop_sequence", u, o.stop_reason)
        return self._message(content, STOP_REASONS.get(o.finish_reason or "stop", "end_turn"), u)

    def count(self, tokens: int) -> dict[str, Any]:
        return {"input_tokens": tokens}

    # -- streaming --------------------------------------------------------------------------------------
    def start(self) -> list[str]:
        return [named_event("message_start", {"type": "message_start",
                                              "message": self._message([], None, Usage(prompt_tokens=0,
                                                                       completion_tokens=0, total_tokens=0))}),
                named_event("ping", {"type": "ping"})]

    def _close(self) -> list[str]:
        if self.open is None:
            return []
        self.open = None
        return [named_event("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def _begin(self, kind: str, block: dict[str, Any]) -> list[str]:
        out = self._close()
        self.index += 1
        self.open = kind
        return out + [named_event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                          "content_block": block})]

    def _delta(self, delta: dict[str, Any]) -> str:
        return named_event("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                                   "delta": delta})

    def feed(self, event: Event) -> list[str]:
        """The Messages events for one typed engine event (events.py) of the chat answer."""
        from swiftbox.serving import events as ev

        out: list[str] = []
        if isinstance(event, ev.ReasoningDelta):
            if self.open != "thinking":
                out += self._begin("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            out.append(self._delta({"type": "thinking_delta", "thinking": event.text}))
        elif isinstance(event, ev.TextDelta):
            if self.open != "text":
                out += self._begin("text", {"type": "text", "text": ""})
            out.append(self._delta({"type": "text_delta", "text": event.text}))
        elif isinstance(event, ev.ToolCallDelta):
            if event.opens:
                out += self._begin("tool_use", {"type": "tool_use", "id": event.id or f"toolu_{event.call}",
                                                "name": event.name or "", "input": {}})
                self.tools[event.call] = self.index
            if event.arguments and self.tools.get(event.call) == self.index and self.open == "tool_use":
                out.append(self._delta({"type": "input_json_delta", "partial_json": event.arguments}))
        elif isinstance(event, ev.Finish):
            self.reason = STOP_REASONS.get(event.reason, "end_turn")
            if event.stop_sequence is not None:
                self.stop_sequence = event.stop_sequence
        elif isinstance(event, ev.Failed):
            out += self._close()
            out.append(named_event("error", event.error.anthropic_body()))
        return out

    def _stop_delta(self) -> dict[str, Any]:
        if self.stop_sequence is not None and self.reason == "end_turn":
            return {"stop_reason": "stop_sequence", "stop_sequence": self.stop_sequence}
        return {"stop_reason": self.reason or "end_turn", "stop_sequence": None}

    def end(self, u: Optional[Usage]) -> list[str]:
        u = u or Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0)
        return self._close() + [
            named_event("message_delta", {"type": "message_delta",
                                          "delta": self._stop_delta(),
                                          "usage": {"input_tokens": u.prompt_tokens,
                                                    "output_tokens": u.completion_tokens}}),
            named_event("message_stop", {"type": "message_stop"})]

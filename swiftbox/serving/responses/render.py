"""The bodies of OpenAI Responses (/v1/responses): the Response object (whole, or created / in_progress /
completed in a stream) and the typed stream events in between, built from the chat answer."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from swiftbox.serving.protocol import Usage, now
from swiftbox.serving.render import named_event, uid

if TYPE_CHECKING:
    from swiftbox.serving.answer import Output
    from swiftbox.serving.events import Event


class ResponsesBuilder:
    """The bodies of one /v1/responses request: the Response object (whole, or created / in_progress /
    completed in a stream) and the typed stream events in between, each with its sequence_number."""

    def __init__(self, model: str, echo: dict[str, Any], names: Optional[dict[str, tuple[str, str]]] = None):
        self.id, self.model, self.echo, self.created = uid("resp"), model, echo, now()
        self.names = names or {}       # flat function name -> (namespace, name): responses/translate.py
        self.seq = 0
        self.items: list[dict[str, Any]] = []     # the output items so far (streaming)
        self.open: Optional[dict[str, Any]] = None
        self.calls: dict[int, dict[str, Any]] = {}
        self.reason: Optional[str] = None
        self.final: dict[str, Any] = {}          # the completed Response object, once a stream has ended

    def response(self, status: str, output: list[dict[str, Any]], u: Optional[Usage],
                 reason: Optional[str] = None) -> dict[str, Any]:
        incomplete = status == "incomplete"
        body = {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "error": None, "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
                "model": self.model, "output": output, "parallel_tool_calls": True,
                "text": {"format": {"type": "text"}}, "truncation": "disabled", "metadata": {},
                "usage": None if u is None else {
                    "input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens,
                    "total_tokens": u.total_tokens, "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0}}}
        return {**body, **self.echo}

    def items_of(self, o: Output) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if o.reasoning:
            items.append(self._reasoning(o.reasoning))
        if o.text:
            items.append(self._message(o.text))
        items += [self._call(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in o.tool_calls]
        return items

    def whole(self, o: Output, u: Usage) -> dict[str, Any]:
        return self.response("incomplete" if o.finish_reason == "length" else "completed", self.items_of(o), u)

    @staticmethod
    def _reasoning(text: str) -> dict[str, Any]:
        return {"type": "reasoning", "id": uid("rs"), "summary": [{"type": "summary_text", "text": text}]}

    @staticmethod
    def _message(text: str, status: str = "completed") -> dict[str, Any]:
        return {"type": "message", "id": uid("msg"), "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}

    def _call(self, call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
        """A function_call item; a call to a namespaced function names it as declared, with its namespace."""
        item = {"type": "function_call", "id": uid("fc"), "call_id": call_id, "name": name,
                "arguments": arguments, "status": status}
        if name in self.names:
            item["namespace"], item["name"] = self.names[name]
        return item

    # -- streaming --------------------------------------------------------------------------------------
    def event(self, kind: str, /, **fields: Any) -> str:
        body = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return named_event(kind, body)

    def start(self) -> list[str]:
        first = self.response("in_progress", [], None)
        return [self.event("response.created", response=first), self.event("response.in_progress", response=first)]

    def _close(self) -> list[str]:
        item, self.open = self.open, None
        if item is None:
            return []
        at = len(self.items) - 1
        out = []
        if item["type"] == "message":
            text = item["content"][0]["text"]
            item["status"] = "completed"
            out.append(self.event("response.output_text.done", item_id=item["id"], output_index=at,
                                  content_index=0, text=text, logprobs=[]))
            out.append(self.event("response.content_part.done", item_id=item["id"], output_index=at,
                                  content_index=0, part=item["content"][0]))
        elif item["type"] == "function_call":
            item["status"] = "completed"
            out.append(self.event("response.function_call_arguments.done", item_id=item["id"], output_index=at,
                                  name=item["name"], arguments=item["arguments"]))
        elif item["type"] == "reasoning":
            out.append(self.event("response.reasoning_summary_text.done", item_id=item["id"], output_index=at,
                                  summary_index=0, text=item["summary"][0]["text"]))
            out.append(self.event("response.reasoning_summary_part.done", item_id=item["id"], output_index=at,
                                  summary_index=0, part=item["summary"][0]))
        return out + [self.event("response.output_item.done", output_index=at, item=item)]

    def _begin(self, item: dict[str, Any]) -> list[str]:
        out = self._close()
        self.items.append(item)
        self.open = item
        at = len(self.items) - 1
        added = {**item, "content": []} if item["type"] == "message" else {**item, "summary": []} \
            if item["type"] == "reasoning" else item
        out.append(self.event("response.output_item.added", output_index=at, item=added))
        if item["type"] == "message":
            out.append(self.event("response.content_part.added", item_id=item["id"], output_index=at,
                                  content_index=0, part={"type": "output_text", "text": "", "annotations": []}))
        elif item["type"] == "reasoning":
            out.append(self.event("response.reasoning_summary_part.added", item_id=item["id"], output_index=at,
                                  summary_index=0, part={"type": "summary_text", "text": ""}))
        return out

    def feed(self, event: Event) -> list[str]:
        """The Responses events for one typed engine event (events.py) of the chat answer."""
        from swiftbox.serving import events as ev

        out: list[str] = []
        if isinstance(event, ev.ReasoningDelta):
            if self.open is None or self.open["type"] != "reasoning":
                out += self._begin(self._reasoning(""))
            item = self.open
            item["summary"][0]["text"] += event.text          # type: ignore[index]
            out.append(self.event("response.reasoning_summary_text.delta", item_id=item["id"],  # type: ignore[index]
                                  output_index=len(self.items) - 1, summary_index=0, delta=event.text))
        elif isinstance(event, ev.TextDelta):
            if self.open is None or self.open["type"] != "message":
                out += self._begin(self._message("", "in_progress"))
            item = self.open
            item["content"][0]["text"] += event.text          # type: ignore[index]
            out.append(self.event("response.output_text.delta", item_id=item["id"],  # type: ignore[index]
                                  output_index=len(self.items) - 1, content_index=0, delta=event.text, logprobs=[]))
        elif isinstance(event, ev.ToolCallDelta):
            if event.opens:
                item = self._call(event.id or uid("call"), event.name or "", "", "in_progress")
                out += self._begin(item)
                self.calls[event.call] = item
            found = self.calls.get(event.call)
            if event.arguments and found is not None and found is self.open:
                found["arguments"] += event.arguments
                out.append(self.event("response.function_call_arguments.delta", item_id=found["id"],
                                      output_index=len(self.items) - 1, delta=event.arguments))
        elif isinstance(event, ev.Finish):
            self.reason = event.reason
        elif isinstance(event, ev.Failed):
            err = event.error
            out += self._close()
            out.append(self.event("error", code=err.code, message=err.message, param=err.param))
        return out

    def end(self, u: Optional[Usage]) -> list[str]:
        out = self._close()
        status = "incomplete" if self.reason == "length" else "completed"
        final = self.final = self.response(status, self.items, u)
        return out + [self.event("response.completed" if status == "completed" else "response.incomplete",
                                 response=final)]

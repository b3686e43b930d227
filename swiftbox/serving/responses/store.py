"""The bounded in-memory store behind /v1/responses: response id -> the model that answered, the conversation so
far (as chat messages, what `previous_response_id` continues), the Response object as it was sent (GET
/v1/responses/{id}) and the input items of that request (GET /v1/responses/{id}/input_items).

Bounded twice: at most MAX_RESPONSES entries and MAX_CHARS characters of stored text in all; past either, the
oldest responses are evicted (a follow-up, GET or DELETE naming one gets 404). Nothing survives a restart.
`store: false` responses are never put here. One store per app, guarded by a lock (routes run on one event loop,
but the store may be read from worker threads by tests).
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

from swiftbox.serving.errors import ApiError

MAX_RESPONSES = 1024
MAX_CHARS = 64 * 1024 * 1024


@dataclass
class Stored:
    model: str
    messages: list[dict[str, Any]]                           # the conversation, as chat messages
    response: Optional[dict[str, Any]] = None                # the Response object as sent
    input_items: list[dict[str, Any]] = field(default_factory=list)   # this request's input, as items with ids
    size: int = 0


class ResponseStore:
    def __init__(self, max_responses: int = MAX_RESPONSES, max_chars: int = MAX_CHARS):
        self.max_responses, self.max_chars = max_responses, max_chars
        self._items: OrderedDict[str, Stored] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def put(self, response_id: str, model: str, messages: list[dict[str, Any]], *,
            response: Optional[dict[str, Any]] = None, input_items: Optional[list[dict[str, Any]]] = None) -> None:
        entry = Stored(model, messages, response, list(input_items or []))
        entry.size = len(json.dumps([messages, response, entry.input_items], ensure_ascii=False))
        if entry.size > self.max_chars:
            return      # larger than the whole store: not kept (a follow-up gets 404)
        with self._lock:
            old = self._items.pop(response_id, None)
            if old is not None:
                self._chars -= old.size
            self._items[response_id] = entry
            self._chars += entry.size
            while len(self._items) > self.max_responses or self._chars > self.max_chars:
                _, dropped = self._items.popitem(last=False)
                self._chars -= dropped.size

    def _find(self, response_id: str, param: Optional[str], message: str, code: str) -> Stored:
        with self._lock:
            found = self._items.get(response_id)
            if found is not None:
                self._items.move_to_end(response_id)
        if found is None:
            raise ApiError(404, f"{message} with id '{response_id}' not found (unknown, stored with store: false, "
                                f"deleted, or evicted: this server keeps the last {self.max_responses})",
                           param=param, code=code)
        return found

    def get(self, response_id: str) -> tuple[str, list[dict[str, Any]]]:
        """(model, messages) for previous_response_id; 404 in OpenAI's shape when unknown or evicted."""
        found = self._find(response_id, "previous_response_id", "Previous response", "previous_response_not_found")
        return found.model, [dict(m) for m in found.messages]

    def entry(self, response_id: str) -> Stored:
        """The stored response (GET / input_items); 404 in OpenAI's shape when unknown, deleted or evicted."""
        return self._find(response_id, None, "Response", "not_found")

    def delete(self, response_id: str) -> None:
        """Forget a response (404 when it is not here)."""
        self.entry(response_id)
        with self._lock:
            gone = self._items.pop(response_id, None)
            if gone is not None:
                self._chars -= gone.size

    def __len__(self) -> int:
        return len(self._items)

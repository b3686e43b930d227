"""The bounded in-memory store behind /v1/responses' `previous_response_id`: response id -> the conversation
so far (as chat messages) and the model that answered it.

Bounded twice: at most MAX_RESPONSES entries and MAX_CHARS characters of stored text in all; past either, the
oldest responses are evicted (a follow-up naming one gets 404). Nothing survives a restart. `store: false`
responses are never put here. One store per app, guarded by a lock (routes run on one event loop, but the
store may be read from worker threads by tests).
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from swiftbox.serving.errors import ApiError

MAX_RESPONSES = 1024
MAX_CHARS = 64 * 1024 * 1024


class ResponseStore:
    def __init__(self, max_responses: int = MAX_RESPONSES, max_chars: int = MAX_CHARS):
        self.max_responses, self.max_chars = max_responses, max_chars
        self._items: OrderedDict[str, tuple[str, list[dict[str, Any]], int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def put(self, response_id: str, model: str, messages: list[dict[str, Any]]) -> None:
        size = len(json.dumps(messages, ensure_ascii=False))
        if size > self.max_chars:
            return      # larger than the whole store: not kept (a follow-up gets 404)
        with self._lock:
            self._items[response_id] = (model, messages, size)
            self._chars += size
            while len(self._items) > self.max_responses or self._chars > self.max_chars:
                _, (_, _, dropped) = self._items.popitem(last=False)
                self._chars -= dropped

    def get(self, response_id: str) -> tuple[str, list[dict[str, Any]]]:
        """(model, messages); 404 in OpenAI's shape when unknown or evicted."""
        with self._lock:
            found = self._items.get(response_id)
            if found is not None:
                self._items.move_to_end(response_id)
        if found is None:
            raise ApiError(404, f"Previous response with id '{response_id}' not found (unknown, stored with "
                                f"store: false, or evicted: this server keeps the last {self.max_responses})",
                           param="previous_response_id", code="previous_response_not_found")
        model, messages, _ = found
        return model, [dict(m) for m in messages]

    def __len__(self) -> int:
        return len(self._items)

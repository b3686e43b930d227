"""Anthropic Messages: protocol.py (request bodies), translate.py (onto the chat request), route.py (POST
/v1/messages, /v1/messages/count_tokens), render.py (the message and its SSE events)."""

"""OpenAI chat and text completions: protocol.py (request and response bodies), routes.py (POST
/v1/chat/completions, /v1/completions), render.py (the bodies, whole and SSE), logprobs.py (token logprobs in
OpenAI's shapes)."""

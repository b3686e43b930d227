"""OpenAI Responses: protocol.py (the request body), translate.py (onto the chat request, and back into the stored
conversation), store.py (the bounded store behind previous_response_id, GET, DELETE and input_items), route.py
(/v1/responses), render.py (the Response object and its typed stream events)."""

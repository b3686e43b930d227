"""`serve: {smoke: true}`: start on a (free) port, ask one question with the official openai client, stop.

Checks the models list, one streamed chat answer (measuring time to first token) and, when a key is
set, that a request without it is refused.
"""
from __future__ import annotations

import time

from swiftbox.errors import SwiftboxError

QUESTION = "Is 7 even?"


def smoke(app, *, host: str, port: int, api_key, model: str, log=print, question: str = QUESTION) -> dict:
    import openai

    from swiftbox.serving.server import ServerThread

    server = ServerThread(app, host, port).start()
    log(f"smoke: server on {server.url}")
    try:
        return _ask(server, api_key, model, log, question)
    except openai.OpenAIError as exc:
        raise SwiftboxError(f"smoke: the server answered with an error: {str(exc).splitlines()[0]}") from None
    finally:
        server.stop()


def _ask(server, api_key, model: str, log, question: str = QUESTION) -> dict:
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key=api_key or "unused", max_retries=0, timeout=300)
    listed = [m.id for m in client.models.list()]
    if model not in listed:
        raise SwiftboxError(f"smoke: model {model!r} missing from /v1/models ({listed})")
    started = time.perf_counter()
    ttft, parts, finish, usage = None, [], None, None
    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                            max_tokens=16, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                ttft = ttft if ttft is not None else time.perf_counter() - started
                parts.append(choice.delta.content)
            finish = choice.finish_reason or finish
    answer = "".join(parts)
    if finish is None or usage is None:
        raise SwiftboxError("smoke: the stream ended without a finish_reason or usage")
    auth_refused = None
    if api_key:
        anon = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong-key", max_retries=0, timeout=30)
        try:
            anon.models.list()
            auth_refused = False
        except openai.AuthenticationError:
            auth_refused = True
        if not auth_refused:
            raise SwiftboxError("smoke: a request with a wrong API key was accepted")
    log(f"smoke: {question!r} -> {answer!r} ({finish}, {usage.completion_tokens} tokens)")
    return {"ok": True, "question": question, "answer": answer, "finish_reason": finish,
            "completion_tokens": usage.completion_tokens,
            "ttft_s": round(ttft if ttft is not None else time.perf_counter() - started, 4),
            "seconds": round(time.perf_counter() - started, 4), "models": listed,
            **({"auth_refused": auth_refused} if api_key else {})}

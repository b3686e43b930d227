"""A stand-in for `vllm serve` (CPU tests): same flags we pass, /health open, /v1 guarded by --api-key,
canned OpenAI answers (streamed or not), and a 400 for max_tokens > 1000 like vLLM's context check."""
from __future__ import annotations

import argparse
import json
import os
import sys

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("model")
    ap.add_argument("--host")
    ap.add_argument("--port", type=int)
    ap.add_argument("--served-model-name")
    ap.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY"))  # vLLM reads the env var too
    ap.add_argument("--lora-modules", nargs="*", default=[])
    args, _ = ap.parse_known_args()
    app = FastAPI()

    @app.get("/health")
    def health():
        return {}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        if request.headers.get("authorization") != f"Bearer {args.api_key}":
            return JSONResponse({"error": {"message": "Unauthorized"}}, status_code=401)
        body = await request.json()
        if body.get("max_tokens", 0) > 1000:
            error = {"message": "too long", "type": "BadRequestError", "code": 400}
            return JSONResponse({"error": error}, status_code=400)
        answer = f"fake answer from {body['model']}"
        if body.get("stream"):
            def gen():
                for word in answer.split():
                    chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                             "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
                    yield f"data: {json.dumps(chunk)}\n\n"
                yield "data: [DONE]\n\n"
            return StreamingResponse(gen(), media_type="text/event-stream")
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}

    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    sys.exit(main())

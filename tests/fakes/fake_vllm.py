"""A stand-in for `vllm serve` (CPU tests): same flags we pass, /health open, /v1 guarded by --api-key,
canned OpenAI answers (streamed or not; completions answer each prompt with the prompt as received; a chat whose last
message says "echo" answers the body as received, and /v1/messages and /v1/responses answer {"received": body}),
and a 400 for max_tokens > 1000 like vLLM's context check.
Runtime LoRA updating as vLLM does it: /v1/load_lora_adapter and /v1/unload_lora_adapter exist only with
VLLM_ALLOW_RUNTIME_LORA_UPDATING set and --enable-lora; a load reads adapter_config.json and refuses a rank
above --max-lora-rank; unknown models get 404; /metrics serves a vllm:* family."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", nargs="?")          # `vllm serve MODEL`, or the api_server module's `--model MODEL`
    ap.add_argument("model", nargs="?")
    ap.add_argument("--model", dest="model_flag")
    ap.add_argument("--host")
    ap.add_argument("--port", type=int)
    ap.add_argument("--served-model-name")
    ap.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY"))  # vLLM reads the env var too
    ap.add_argument("--lora-modules", nargs="*", default=[])
    ap.add_argument("--enable-lora", action="store_true")
    ap.add_argument("--max-lora-rank", type=int, default=16)
    args, _ = ap.parse_known_args()
    app = FastAPI()
    models = {args.served_model_name, *(m.split("=")[0] for m in args.lora_modules)}
    runtime = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "").lower() in ("1", "true") and args.enable_lora

    def authorised(request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {args.api_key}"

    def error(message: str, status: int):
        return JSONResponse({"error": {"message": message, "type": "BadRequestError", "code": status}},
                            status_code=status)

    if runtime:
        @app.post("/v1/load_lora_adapter")
        async def load(request: Request):
            if not authorised(request):
                return error("Unauthorized", 401)
            body = await request.json()
            if body["lora_name"] in models:
                return error(f"The lora adapter '{body['lora_name']}' has already been loaded.", 400)
            config = json.loads((Path(body["lora_path"]) / "adapter_config.json").read_text())
            if config["r"] > args.max_lora_rank:
                return error(f"LoRA rank {config['r']} is greater than max_lora_rank {args.max_lora_rank}.", 400)
            models.add(body["lora_name"])
            return PlainTextResponse(f"Success: LoRA adapter '{body['lora_name']}' added successfully.")

        @app.post("/v1/unload_lora_adapter")
        async def unload(request: Request):
            if not authorised(request):
                return error("Unauthorized", 401)
            name = (await request.json())["lora_name"]
            if name not in models:
                return error(f"The lora adapter '{name}' cannot be found.", 404)
            models.discard(name)
            return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    @app.get("/metrics")
    def metrics():
        return PlainTextResponse("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n")

    @app.get("/health")
    def health():
        return {}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        if request.headers.get("authorization") != f"Bearer {args.api_key}":
            return JSONResponse({"error": {"message": "Unauthorized"}}, status_code=401)
        body = await request.json()
        if body["model"] not in models:
            return error(f"The model `{body['model']}` does not exist.", 404)
        if body.get("max_tokens", 0) > 1000:
            return error("too long", 400)
        answer = f"fake answer from {body['model']}"
        if body["messages"][-1].get("content") == "echo":      # what the front door relayed, exactly
            answer = json.dumps(body, sort_keys=True)
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

    @app.post("/v1/messages")
    @app.post("/v1/responses")
    async def native(request: Request):
        if not authorised(request):
            return error("Unauthorized", 401)
        return {"received": await request.json()}

    @app.post("/v1/completions")
    async def completions(request: Request):
        """One choice per prompt (vLLM's four prompt forms), whose text is the prompt as this child received it."""
        if not authorised(request):
            return error("Unauthorized", 401)
        body = await request.json()
        prompt = body["prompt"]
        prompts = [prompt] if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)) else prompt
        return {"id": "x", "object": "text_completion", "created": 0, "model": body["model"],
                "choices": [{"index": i, "text": json.dumps(p), "logprobs": None, "finish_reason": "length"}
                            for i, p in enumerate(prompts)],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    sys.exit(main())

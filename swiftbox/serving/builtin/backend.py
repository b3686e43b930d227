"""The built-in engine's `Backend`: chat template, token budget checks, one Run per request, SSE or JSON answers
(the bodies built by openai/render.py from the Run's Outputs).

Each choice (`n`) is its own engine sequence, all n submitted together so they share one prefill; events
come back on an asyncio queue (logprobs, when asked, arrive just before their token; openai/render.py shapes
them). A client that disconnects cancels its sequences, which frees their slots: mid-stream through the
generator's `finally`, for a plain JSON answer by polling `request.is_disconnected()` while it waits.

Prompts longer than `max_prompt_chars` are refused before tokenizing, the chat template's output is capped at the
same bound while it renders, and the chat template and tokenizer run in a worker thread, so one large prompt never
stalls /health or the other streams.
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, AsyncGenerator, AsyncIterator, Optional, Union, cast

from swiftbox.serving.answer import Output, output
from swiftbox.serving.builtin.adapter_slots import AdapterGone, AdapterLoadError
from swiftbox.serving.builtin.constrained import Grammar, Grammars
from swiftbox.serving.builtin.engine import QueueFull
from swiftbox.serving.builtin.sampling import SamplingParams
from swiftbox.serving.builtin.textstream import TextStream
from swiftbox.serving.errors import ApiError, context_exceeded, model_not_found, public_text, queue_full
from swiftbox.serving.openai.logprobs import Entry, LogprobFormatter, PromptEntry
from swiftbox.serving.openai.protocol import ChatCompletionRequest, CompletionRequest
from swiftbox.serving.openai.render import DONE, ChatChunks, ResponseBuilder, error_event
from swiftbox.serving.protocol import Usage, usage

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from swiftbox.serving.adapter_check import CheckedAdapter
    from swiftbox.serving.adapters import AdapterPolicy
    from swiftbox.serving.builtin.engine import BuiltinEngine
    from swiftbox.serving.events import Event
    from swiftbox.serving.metrics import ServeMetrics

AnyRequest = Union[ChatCompletionRequest, CompletionRequest]

DEFAULT_CHAT_MAX_TOKENS = 512
DEFAULT_COMPLETION_MAX_TOKENS = 16
CHARS_PER_TOKEN_BOUND = 32     # no real text averages more characters per token than this
DISCONNECT_POLL_S = 0.25


def special_tokens(tokenizer: Any) -> tuple[str, ...]:
    """The tokenizer's special tokens (what `skip_special_tokens` drops), longest first."""
    found = set(getattr(tokenizer, "all_special_tokens", None) or [])
    for added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(added, "special", False):
            found.add(str(added.content))
    return tuple(sorted((t for t in found if t), key=lambda t: (-len(t), t)))


def first_call_only(events: list[tuple[str, Any]], sent: int) -> list[tuple[str, Any]]:
    """A streamed answer's reader events with every tool call after the first dropped (`sent`: calls already sent):
    `parallel_tool_calls: false`, kept as vLLM keeps it (the first call)."""
    kept = []
    for kind, value in events:
        if kind == "call":
            if sent:
                continue
            sent += 1
        kept.append((kind, value))
    return kept


def prompt_end(req) -> dict[str, bool]:
    """How the rendering ends: the assistant's header (add_generation_prompt) or, with vLLM's
    continue_final_message (an Anthropic prefill), inside the last assistant turn, as transformers renders it."""
    if getattr(req, "continue_final_message", False):
        return {"generation_prompt": False, "continue_final_message": True}
    return {"generation_prompt": bool(getattr(req, "add_generation_prompt", True))}


class BuiltinBackend:
    name = "builtin"

    def __init__(self, engine: BuiltinEngine, tokenizer: Any, *, max_model_len: int,
                 max_prompt_chars: Optional[int] = None, trust_request_chat_template: bool = False):
        self.engine, self.tokenizer, self.max_model_len = engine, tokenizer, max_model_len
        self.trust_request_chat_template = trust_request_chat_template
        self.max_prompt_chars = max_prompt_chars or max_model_len * CHARS_PER_TOKEN_BOUND
        self.runtime_adapters: Optional[AdapterPolicy] = None   # set by open_backend where clients may load adapters
        self.observer: Optional[ServeMetrics] = None            # the app's metrics (set by build_app)
        self.max_lora_rank: Optional[int] = None                # the runtime rank cap (set by open_backend)
        from swiftbox.serving import toolformats

        template = getattr(tokenizer, "chat_template", None)
        self.thinking = toolformats.thinks(template if isinstance(template, str) else None)   # answers may reason
        self.special_tokens = special_tokens(tokenizer)     # what the answer parsers read, then hide from content
        self._grammars: Optional[Grammars] = None               # structured outputs (built on first use)

    def model_names(self) -> list[str]:
        return self.engine.model_names()

    def public(self, text: str) -> str:
        """An error message without the server's paths: the model's directory becomes its served name."""
        where = str(getattr(self.tokenizer, "name_or_path", "") or "")
        return public_text(text, {where: self.model_names()[0]} if where else {})

    async def healthy(self) -> bool:
        thread = self.engine._thread
        return thread is not None and thread.is_alive()

    def engine_stats(self) -> BuiltinEngine:
        return self.engine

    async def extra_metrics(self) -> bytes:
        return b""

    async def native(self, path: str, request: Request, stream: bool) -> None:
        """No API of its own beyond chat: /v1/messages and /v1/responses are translated onto chat."""
        return None

    async def count_tokens(self, req: ChatCompletionRequest) -> int:
        self.check_size(sum(len(m.text()) for m in req.messages), "messages")
        return len(await asyncio.to_thread(self.chat_prompt, req))

    # -- runtime adapters -------------------------------------------------------------------
    async def load_adapter(self, name: str, adapter: CheckedAdapter) -> None:
        try:
            future = self.engine.load_adapter(name, adapter)
        except ValueError as exc:   # loaded (or being loaded) already
            raise ApiError(400, str(exc), param="lora_name", code="adapter_exists") from None
        try:
            await asyncio.wrap_future(future)
        except AdapterLoadError as exc:
            raise ApiError(400, f"lora_path: {exc}", param="lora_path", code="adapter_unsupported") from None

    async def unload_adapter(self, name: str) -> None:
        try:
            self.engine.unload_adapter(name)
        except KeyError:
            raise ApiError(404, f"The lora adapter '{name}' cannot be found.", param="lora_name",
                           code="adapter_not_found") from None

    # -- prompts ----------------------------------------------------------------------------
    def chat_prompt(self, req) -> list[int]:
        """The prompt's ids. The template's output is capped at `max_prompt_chars` while it renders (a template
        or a pile of tools that expands past what the context can take stops there, before any tokenizing)."""
        from swiftbox.compat import TemplateOutputTooLong, chat_template_output_capped
        from swiftbox.data import dialect
        from swiftbox.data.render import render
        from swiftbox.errors import UserError
        from swiftbox.serving.template_kwargs import check_trusted, client_template

        messages = [m.for_template() for m in req.messages]
        choice = req.tool_choice
        if req.tools and choice not in (None, "auto", "none"):
            raise ApiError(400, "the built-in engine does not force tool calls (tool_choice 'required' or a named "
                                "function); use tool_choice 'auto' or the vLLM engine", param="tool_choice")
        tools = req.tools if req.tools and choice != "none" else None
        kwargs = dict(req.chat_template_kwargs or {})
        own = client_template(getattr(req, "chat_template", None), kwargs)
        check_trusted(getattr(req, "chat_template", None), kwargs, self.trust_request_chat_template)
        kwargs.pop("chat_template", None)
        if own is not None:
            kwargs["chat_template"] = own
        dialect.dialect(self.tokenizer)        # probed once, uncapped: how this template prints tools and reasoning
        try:
            with chat_template_output_capped(self.templates(own), self.max_prompt_chars):
                text = render(self.tokenizer, messages, tools, **prompt_end(req), **kwargs)
        except TemplateOutputTooLong:
            text = None
        except UserError as exc:  # the template rejects the conversation (roles, order, ...)
            raise ApiError(400, self.public(str(exc)), param="messages", code="chat_template_error") from None
        if text is None or len(text) > self.max_prompt_chars:
            raise ApiError(400, f"the rendered prompt passed {self.max_prompt_chars} characters, more than this "
                                f"server takes (a context of {self.max_model_len} tokens); it was stopped there",
                           param="messages", code="context_length_exceeded")
        return self.encode(text, "messages", add_special_tokens=False)

    def templates(self, own: Optional[str]) -> list[str]:
        """The template sources a chat request may render with: the client's own, or the tokenizer's (a dict of
        named templates on some tokenizers)."""
        if own is not None:
            return [own]
        found = getattr(self.tokenizer, "chat_template", None)
        if isinstance(found, dict):
            return [t for t in found.values() if isinstance(t, str)]
        return [found] if isinstance(found, str) else []

    def answer_parser(self, req):
        """How to read tool calls / reasoning out of this request's answers (None: plain text)."""
        from swiftbox.serving import toolformats

        template = getattr(self.tokenizer, "chat_template", None)
        tools = req.tools if req.tools and req.tool_choice != "none" else None
        return toolformats.answer_parser(template if isinstance(template, str) else None, tools,
                                         hidden=self.special_tokens)

    def opens_reasoning(self, prompt: Any) -> bool:
        """Whether the generation prompt leaves the model's reasoning block open (DeepSeek-R1, Qwen3.5: the answer
        starts inside it)."""
        from swiftbox.serving.toolformats.reasoning import opened_by, reasoning_of

        template = getattr(self.tokenizer, "chat_template", None)
        return opened_by(self.prompt_tail(prompt), reasoning_of(template if isinstance(template, str) else None))

    def prompt_tail(self, prompt: Any) -> str:
        """The end of a chat prompt as text, special tokens kept (does the generation prompt open reasoning?)."""
        return self.tokenizer.decode(list(prompt)[-16:], skip_special_tokens=False) if prompt else ""

    def text_prompt(self, req: CompletionRequest) -> list[list[int]]:
        """The token ids of each of the request's prompts (a token-id prompt is checked against the vocabulary)."""
        vocab = self.vocab_size()
        out = []
        for prompt in req.prompt:
            if isinstance(prompt, str):
                out.append(self.encode(prompt, "prompt"))
                continue
            if max(prompt) >= vocab:
                raise ApiError(400, f"prompt: token id {max(prompt)} is outside this model's vocabulary "
                                    f"(0..{vocab - 1})", param="prompt", code="invalid_value")
            out.append(list(prompt))
        return out

    def vocab_size(self) -> int:
        config = getattr(self.engine.model, "config", None)
        return int(getattr(config, "vocab_size", None) or len(self.tokenizer))

    def encode(self, text: str, param: str, **kwargs) -> list[int]:
        """The prompt's ids; a tokenizer that cannot encode it is a 400 naming why (the request's text is what it
        could not take: a word outside a word-level vocabulary, ...), never a 500."""
        try:
            return self.tokenizer(text, **kwargs)["input_ids"]
        except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception; any failure here is the input's
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ApiError(400, f"the model's tokenizer cannot encode this {param}: {reason}", param=param,
                           code="tokenizer_error") from None

    def params(self, req, prompt_len: int, default_max: int, param: str) -> SamplingParams:
        room = self.max_model_len - prompt_len
        if room < 1:
            raise ApiError(400, f"This model's maximum context length is {self.max_model_len} tokens; the prompt "
                                f"has {prompt_len} tokens", param=param, code="context_length_exceeded")
        max_tokens = req.max_tokens if req.max_tokens is not None else min(default_max, room)
        if max_tokens > room:
            raise context_exceeded(prompt_len, max_tokens, self.max_model_len)
        return SamplingParams(max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p, top_k=req.top_k,
                              seed=req.seed, stop=list(req.stop or []), presence_penalty=req.presence_penalty,
                              frequency_penalty=req.frequency_penalty, repetition_penalty=req.repetition_penalty,
                              logprobs=req.logprob_count, logit_bias=self.checked_bias(req))

    # -- logit_bias and structured outputs (sampling.py, constrained.py) ---------------------------
    def checked_bias(self, req) -> Optional[dict[int, float]]:
        """The request's logit_bias (its shape checked by openai/protocol.py), each id within the vocabulary, or a 400
        naming logit_bias."""
        bias = getattr(req, "logit_bias", None)
        if not bias:
            return None
        vocab = self.vocab_size()
        outside = sorted(t for t in bias if t >= vocab)
        if outside:
            raise ApiError(400, f"logit_bias: token id {outside[0]} is outside this model's vocabulary "
                                f"(0..{vocab - 1})", param="logit_bias", code="invalid_value")
        return dict(bias)

    async def output_grammar(self, req: ChatCompletionRequest) -> Optional[Grammar]:
        """The compiled grammar of the request's response format (None: free text), in a worker thread (the first
        one builds llguidance's view of the tokenizer, ~1 s); a schema it cannot compile is a 400 naming the field."""
        kind, schema, param = req.output_format
        if kind is None:
            return None
        if getattr(req, "continue_final_message", False):
            raise ApiError(400, f"{param}: a structured output starts a new answer; it cannot continue a prefilled "
                                "assistant turn", param=param, code="unsupported_field")
        if req.tools and req.tool_choice != "none":
            raise ApiError(400, f"{param}: the built-in engine holds the whole answer to the format, so the model "
                                "could not call a tool; send the tools or the format (or tool_choice 'none'), or use "
                                "the vLLM engine", param=param, code="unsupported_field")
        if self._grammars is None:
            self._grammars = Grammars(self.tokenizer, self.engine.eos_ids, self.vocab_size())
        return await asyncio.to_thread(self._grammars.compile, kind, schema, param)

    def adapter_for(self, model: str) -> Optional[str]:
        """The engine's adapter for this model name, resolved once per request (404 once it is unloaded)."""
        try:
            return self.engine.adapter_id(model)
        except KeyError:
            raise model_not_found(model, self.model_names()) from None

    def check_size(self, chars: int, param: str) -> None:
        if chars > self.max_prompt_chars:
            raise ApiError(400, f"the prompt has {chars} characters, more than this server takes "
                                f"({self.max_prompt_chars}, for a context of {self.max_model_len} tokens)",
                           param=param, code="context_length_exceeded")

    def check_room(self, n: int) -> None:
        if not self.engine.has_room(n):
            raise queue_full(self.engine.load()["waiting"])

    # -- routes -----------------------------------------------------------------------------
    async def chat(self, req: ChatCompletionRequest, request: Request) -> Response:
        started = time.perf_counter()
        prompt, params = await self._chat_input(req)
        return await self._respond(req, prompt, params, request, chat=True, started=started)

    async def chat_events(self, req: ChatCompletionRequest, request: Request) -> AsyncIterator[Event]:
        """The answer as the typed event stream (what the Anthropic / Responses routes render); its checks (a
        4xx) raise here, before any event."""
        started = time.perf_counter()
        prompt, params = await self._chat_input(req)
        return Run(self, req, prompt, params, started=started).chat_events()

    async def _chat_input(self, req: ChatCompletionRequest) -> tuple[list[int], SamplingParams]:
        """The chat request's prompt ids and sampling settings, every check on the way (a 400 names the field)."""
        self.check_size(sum(len(m.text()) for m in req.messages), "messages")
        self.check_room(req.n)
        prompt = await asyncio.to_thread(self.chat_prompt, req)
        params = self.params(req, len(prompt), DEFAULT_CHAT_MAX_TOKENS, "messages")
        params.grammar = await self.output_grammar(req)
        if params.grammar is not None and self.opens_reasoning(prompt):
            param = req.output_format[2]
            raise ApiError(400, f"{param}: this model's prompt opens a reasoning block, and the built-in engine would "
                                "hold the reasoning itself to the format; send chat_template_kwargs "
                                "{\"enable_thinking\": false} where the template takes it, or use the vLLM engine (its "
                                "reasoning parser applies the format after the reasoning)", param=param,
                           code="unsupported_field")
        return prompt, params

    async def completion(self, req: CompletionRequest, request: Request) -> Response:
        """One or more prompts (a batch: each prompt its own prefill and `n` rows, choices prompt-major)."""
        started = time.perf_counter()
        self.check_size(sum(len(p) for p in req.prompt if isinstance(p, str)), "prompt")
        sequences = len(req.prompt) * req.n
        if sequences > self.engine.max_waiting:
            raise ApiError(400, f"prompt: {len(req.prompt)} prompts x n={req.n} are {sequences} sequences, more than "
                                f"this server queues ({self.engine.max_waiting}); send fewer prompts per request",
                           param="prompt", code="invalid_value")
        self.check_room(sequences)
        prompts = await asyncio.to_thread(self.text_prompt, req)
        params = [self.params(req, len(p), DEFAULT_COMPLETION_MAX_TOKENS, "prompt") for p in prompts]
        return await self._respond(req, prompts, params, request, chat=False, started=started)

    async def _respond(self, req: AnyRequest, prompt: Union[list[int], list[list[int]]],
                       params: Union[SamplingParams, list[SamplingParams]], request: Optional[Request], *, chat: bool,
                       started: Optional[float] = None) -> Response:
        from fastapi.responses import JSONResponse, Response, StreamingResponse

        run = Run(self, req, prompt, params, started=started)
        if req.stream:
            return StreamingResponse(run.chat_sse() if chat else run.completion_sse(),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        task = asyncio.ensure_future(run.whole(chat))
        try:
            while True:  # an abandoned request must not keep its batch slots until it finishes
                done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
                if done:
                    return JSONResponse(task.result().model_dump())
                if request is not None and await request.is_disconnected():
                    task.cancel()
                    return Response(status_code=499)
        finally:
            if not task.done():
                task.cancel()
            run.cancel()


class Run:
    """One request in flight: its n sequences, their text streams, and the answer being built."""

    def __init__(self, backend: BuiltinBackend, req: AnyRequest, prompt: Union[list[int], list[list[int]]],
                 params: Union[SamplingParams, list[SamplingParams]], started: Optional[float] = None):
        """`prompt`: one prompt's ids, or (a completions batch) one list per prompt with `params` per prompt; choice
        i belongs to prompt i // n."""
        many = bool(prompt) and isinstance(prompt[0], list)
        self.prompts = cast(list[list[int]], list(prompt) if many else [prompt])
        self.per_prompt = list(params) if isinstance(params, list) else [params] * len(self.prompts)
        self.backend, self.req, self.params = backend, req, self.per_prompt[0]
        self.count = len(self.prompts) * req.n           # choices
        self.adapter = backend.adapter_for(req.model)   # before any answer is sent: a 404, not a broken stream
        self.started = started if started is not None else time.perf_counter()
        self.last_token: list[Optional[float]] = [None] * self.count
        self.observed = False
        self.chat = isinstance(req, ChatCompletionRequest)
        self.bodies = ResponseBuilder.start("chat" if self.chat else "completion", req.model,
                                            include_usage=req.include_usage)
        self.queue: asyncio.Queue = asyncio.Queue()
        self.handles: list[Any] = []
        self.streams = [TextStream(backend.tokenizer, self.params.stop) for _ in range(self.count)]
        self.tokens = [0] * self.count
        wants_tools = isinstance(req, ChatCompletionRequest) and bool(req.tools) and req.tool_choice != "none"
        chat_parsed = isinstance(req, ChatCompletionRequest) and (wants_tools or backend.thinking)
        self.parser = backend.answer_parser(req) if chat_parsed else None   # plain text: no parser to build
        self.readers: dict[int, Any] = {}          # choice -> its answer's stream reader (toolformats)
        self.calls_sent = [0] * req.n
        if self.parser is not None and hasattr(self.parser, "stream"):
            self.parser = self.parser.after(backend.prompt_tail(prompt))
            for text_stream in self.streams:      # the parser reads the special tokens its format writes
                text_stream.keep_special = True
        self.want_logprobs = self.params.logprobs is not None
        self.logprobs: list[list[PromptEntry]] = [[] for _ in range(self.count)]   # per choice, since the last chunk
        self._pending_lp: list = [None] * self.count
        self.fmt = LogprobFormatter(backend.tokenizer, as_ids=req.return_tokens_as_token_ids)
        echo = isinstance(req, CompletionRequest) and req.echo
        # the echoed prompt: its text (a token-id prompt decoded, as vLLM does) and, with logprobs, its tokens'
        self.echoes = [self._echo_text(p, i) for i, p in enumerate(self.prompts)] if echo else [""] * len(self.prompts)
        self.prompt_lp = self.want_logprobs and echo
        self.echoed = [False] * self.count            # the echo chunk is sent (streaming)
        self.offsets = [0] * self.count               # characters of text sent so far (streaming text_offset)

    def _echo_text(self, ids: list[int], p: int) -> str:
        given = self.req.prompt[p] if isinstance(self.req, CompletionRequest) else None
        return given if isinstance(given, str) else self.backend.tokenizer.decode(ids)

    def prompt_of(self, i: int) -> int:
        return i // self.req.n

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        adapter = self.adapter
        n = self.req.n
        # a completion's end-of-text token is reported (its logprob, and it counts as a completion token, as vLLM)
        extra: dict[str, Any] = {} if self.chat else {"eos_events": True}
        if self.prompt_lp:
            extra["prompt_logprobs"] = self.params.logprobs
        try:
            for p, prompt in enumerate(self.prompts):
                params = []
                for j in range(n):
                    sp = self.per_prompt[p]
                    if n > 1 and sp.seed is not None:
                        sp = SamplingParams(**{**sp.__dict__, "seed": sp.seed + j})
                    params.append(sp)
                sinks = [(lambda k: lambda event: self.queue.put_nowait((k, event)))(p * n + j) for j in range(n)]
                self.handles += self.backend.engine.submit_many(prompt, params, adapter, sinks, loop, **extra)
        except QueueFull as full:
            self.cancel()
            raise queue_full(full.waiting) from None
        except AdapterGone:  # unloaded between the model check and here
            self.cancel()
            raise model_not_found(self.req.model, self.backend.model_names()) from None

    def take_logprobs(self, i: int) -> list[PromptEntry]:
        """The logprob entries of choice i's tokens since the last call (what the next chunk carries)."""
        taken, self.logprobs[i] = self.logprobs[i], []
        return taken

    def chat_logprobs(self, entries: list[PromptEntry]) -> Optional[dict]:
        """A chat answer's logprobs (its entries are generated tokens: never a prompt's logprob-less first)."""
        return self.fmt.chat(cast(list[Entry], entries)) if self.want_logprobs else None

    def completion_logprobs(self, i: int, entries: list[PromptEntry], offset: int = 0) -> Optional[dict]:
        """Choice i's logprobs in the legacy shape; an end-of-text answer (no token) still carries its own entry."""
        if not self.want_logprobs:
            return None
        return self.fmt.completion(entries, offset)[0]

    def cancel(self) -> None:
        for h in self.handles:
            h.cancel()

    async def events(self):
        """Yields (index, text_delta, finish_reason|None) until every choice has finished; an echoed prompt's
        logprobs (None first, then one entry per later prompt token) are yielded as (index, None, None) when they
        arrive, before that choice's first token."""
        open_ = set(range(self.count))
        while open_:
            i, (kind, value) = await self.queue.get()
            if i not in open_:
                continue
            stream = self.streams[i]
            if kind == "logprobs":
                self._pending_lp[i] = value
                continue
            if kind == "prompt_logprobs":
                self.logprobs[i] = [(self.prompts[self.prompt_of(i)][0], None), *value, *self.logprobs[i]]
                yield i, None, None
                continue
            if kind == "eos":     # the end-of-text token: no text; its logprob when asked, and it counts (vLLM)
                self.tokens[i] += 1
                if self._pending_lp[i] is not None:
                    self.logprobs[i].append((value, self._pending_lp[i]))
                    self._pending_lp[i] = None
                continue
            if kind == "token":
                self.tokens[i] += 1
                self._observe_token(i)
                if self._pending_lp[i] is not None:
                    self.logprobs[i].append((value, self._pending_lp[i]))
                    self._pending_lp[i] = None
                delta = stream.add(value)
                if stream.stopped:
                    self.handles[i].cancel()
                    open_.discard(i)
                    yield i, delta, "stop"
                elif delta:
                    yield i, delta, None
            elif kind == "done":
                open_.discard(i)
                yield i, stream.flush(), "stop" if value in ("stop", "cancelled") else value
            else:
                raise ApiError(503, self.backend.public(f"generation failed: {value}"), type="server_error",
                               code="engine_error")

    def usage(self) -> Usage:
        return usage(sum(len(p) for p in self.prompts), sum(self.tokens))

    def _observe_token(self, i: int) -> None:
        observer = self.backend.observer
        if observer is None:
            return
        now, last = time.perf_counter(), self.last_token[i]
        if last is None:
            observer.observe_first_token(self.req.model, now - self.started)
        else:
            observer.observe_next_token(self.req.model, now - last)
        self.last_token[i] = now

    def _observe_done(self) -> None:
        observer = self.backend.observer
        if observer is None or self.observed or not self.handles:
            return
        self.observed = True
        observer.observe_done(self.req.model, prompt_tokens=sum(len(p) for p in self.prompts),
                              generated=sum(self.tokens), seconds=time.perf_counter() - self.started)

    async def whole(self, chat: bool) -> Any:
        """The whole answer's body (ChatCompletionResponse or CompletionResponse)."""
        self.start()
        texts: list[str] = [""] * self.count
        reasons: list[Optional[str]] = [None] * self.count
        try:
            async for i, delta, reason in self.events():
                texts[i] += delta or ""
                if reason:
                    reasons[i] = reason
        finally:
            self.cancel()
            self._observe_done()
        if chat:
            return self.bodies.chat([self._output(i, texts[i], reasons[i]) for i in range(self.count)], self.usage())
        outputs = [Output(i, self.echoes[self.prompt_of(i)] + texts[i], reasons[i],
                          logprobs=self.completion_logprobs(i, self.take_logprobs(i))) for i in range(self.count)]
        return self.bodies.completion(outputs, self.usage())

    def _output(self, i: int, text: str, reason: Optional[str], logprobs: bool = True) -> Output:
        """Choice i's finished chat answer (tool calls and reasoning split out), with the logprobs of its tokens
        since the last chunk (unless `logprobs` is False: a stream sent them as events already)."""
        found = output(i, text, reason, self.parser, self.chat_logprobs(self.take_logprobs(i)) if logprobs else None)
        found.stop_reason = self.streams[i].matched
        if getattr(self.req, "parallel_tool_calls", None) is False:
            found.tool_calls = found.tool_calls[:1]
        return found

    def _chunk(self, i: int, delta: Optional[str], reason: Optional[str]) -> str:
        """One completion SSE chunk; it carries the logprobs of choice i's tokens received since the previous chunk
        (its text_offset counts from the characters already sent, as vLLM's stream does). A chat stream is rendered
        from the typed events instead (chat_sse)."""
        entries = self.take_logprobs(i)
        logprobs = self.completion_logprobs(i, entries, self.offsets[i])
        self.offsets[i] += len(delta or "")
        return self.bodies.completion_chunk(i, delta or "", reason, logprobs)

    def _echo_chunk(self, i: int) -> Optional[str]:
        """Choice i's echoed prompt as its first chunk (with the prompt's logprobs, once they are in), once."""
        if self.echoed[i] or not self.echoes[self.prompt_of(i)]:
            return None
        self.echoed[i] = True
        return self._chunk(i, self.echoes[self.prompt_of(i)], None)

    def _parsed_events(self, i: int, delta: Optional[str], reason: Optional[str], held: list[str]) -> list[Event]:
        """Choice i's answer read as it streams (toolformats' reader and its buffering rule): reasoning and content
        deltas as they settle, each tool call opened then its arguments, then the finish (tool_calls where calls
        went out). A parser without a stream reader (a plain text -> Parsed function) reads the whole answer at its
        end: its calls go out whole."""
        from swiftbox.serving.events import Finish, ReasoningDelta, TextDelta, ToolCallDelta

        out: list[Event] = []
        if not hasattr(self.parser, "stream"):
            held[i] += delta or ""
            if not reason:
                return []
            o = self._output(i, held[i], reason, logprobs=False)
            if o.reasoning:
                out.append(ReasoningDelta(i, o.reasoning))
            if o.text:
                out.append(TextDelta(i, o.text))
            out += [ToolCallDelta(i, k, c["id"], c["function"]["name"], c["function"]["arguments"])
                    for k, c in enumerate(o.tool_calls)]
            return out + [Finish(i, o.finish_reason or reason, self.streams[i].matched)]
        reader = self.readers.get(i)
        if reader is None:
            reader = self.readers[i] = self.parser.stream()   # type: ignore[union-attr]
        found = reader.feed(delta) if delta else []
        if reason:
            found += reader.finish()
        if getattr(self.req, "parallel_tool_calls", None) is False:
            found = first_call_only(found, self.calls_sent[i])
        for kind, value in found:
            if kind == "reasoning":
                out.append(ReasoningDelta(i, value))
            elif kind == "text":
                out.append(TextDelta(i, value))
            else:
                fn, call = value["function"], self.calls_sent[i]
                out += [ToolCallDelta(i, call, value["id"], fn["name"]),
                        ToolCallDelta(i, call, arguments=fn["arguments"])]
                self.calls_sent[i] += 1
        if reason:
            out.append(Finish(i, "tool_calls" if self.calls_sent[i] and reason == "stop" else reason,
                              self.streams[i].matched))
        return out

    async def chat_events(self) -> AsyncGenerator[Event, None]:
        """This chat request's answer as the typed engine event stream (events.py): Started, then per choice its
        tokens' logprobs (when asked), reasoning / text / tool-call deltas and its Finish, then Done with the
        usage; a failure is a Failed event (at the start: the only event)."""
        from swiftbox.serving.events import Done, Failed, Finish, Started, TextDelta

        try:
            self.start()
        except ApiError as err:  # the queue filled between the check and the submit
            yield Failed(err)
            return
        try:
            yield Started(self.count)
            held = [""] * self.count
            try:
                async for i, delta, reason in self.events():
                    if self.want_logprobs:
                        for token in self.fmt.events(i, cast(list[Entry], self.take_logprobs(i))):
                            yield token
                    if self.parser:      # tool calls / reasoning: read as the answer streams
                        for event in self._parsed_events(i, delta, reason, held):
                            yield event
                        continue
                    if delta:
                        yield TextDelta(i, delta)
                    if reason:
                        yield Finish(i, reason, self.streams[i].matched)
            except ApiError as err:
                yield Failed(err)
            yield Done(self.usage())
        finally:
            self.cancel()
            self._observe_done()

    async def completion_sse(self):
        """A streamed text completion: the echoed prompt (when asked), text chunks, the usage chunk when asked."""
        try:
            self.start()
        except ApiError as err:  # the queue filled between the check and the submit
            yield error_event(err)
            yield DONE
            return
        try:
            for i in range(self.count):
                if not self.prompt_lp and (echoed := self._echo_chunk(i)):
                    yield echoed
            try:
                async for i, delta, reason in self.events():
                    if echoed := self._echo_chunk(i):   # with logprobs: once the prompt's are in
                        yield echoed
                    if delta is None and reason is None:
                        continue
                    if delta and reason:
                        yield self._chunk(i, delta, None)
                        delta = None
                    if delta or reason:
                        yield self._chunk(i, delta, reason)
            except ApiError as err:
                yield error_event(err)
            if self.req.include_usage:
                yield self.bodies.usage_chunk("completion", self.usage())
            yield DONE
        finally:
            self.cancel()
            self._observe_done()

    async def chat_sse(self):
        """A streamed chat answer: the typed events rendered as OpenAI chat chunks (openai/render.ChatChunks)."""
        chunks = ChatChunks(self.bodies)
        events = self.chat_events()
        try:
            async for event in events:
                for chunk in chunks.feed(event):
                    yield chunk
            yield DONE
        finally:
            await events.aclose()
            self.cancel()
            self._observe_done()

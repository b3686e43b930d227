"""Structured outputs on the built-in engine: a request's JSON format compiled by llguidance, one matcher per sequence.

Why llguidance (measured on SmolLM2-135M's 49,152-token vocabulary, docs/serving.md "Structured outputs"): one
wheel with no dependencies (xgrammar pulls triton and apache-tvm-ffi; outlines-core builds a token index per schema
in ~0.3 s), no GPU, and a mask in ~0.15 ms a token; vLLM uses it too (its `guidance` backend).

    Grammars(tokenizer, eos_ids, vocab_size).compile(kind, schema, param) -> Grammar  (a 400 naming `param`
                                                                                      when llguidance cannot)
    Grammar.matcher() -> Matcher           each sequence (each of `n` choices) gets its own
    Matcher.mask(logits) -> logits         -inf where the grammar forbids the token (out of place)
    Matcher.advance(token) -> bool         True once the grammar is complete (the sequence ends there)

JSON is written with one space after ':' and ',' and no other whitespace (`whitespace_flexible` off): a small
model given free whitespace can pad an answer with newlines until max_tokens.
"""
from __future__ import annotations

import threading
from typing import Any, Optional

from swiftbox.serving.errors import ApiError

JSON_OPTIONS: Any = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}   # JsonCompileOptions
ANY_OBJECT: dict[str, Any] = {"type": "object"}      # json_object: any JSON object, as OpenAI's JSON mode answers


class GrammarRejected(ValueError):
    """A token the grammar does not allow was sampled (the mask was not applied): the sequence fails."""


class Matcher:
    """One sequence's position in its grammar (an `llguidance.LLMatcher`)."""

    def __init__(self, matcher: Any):
        self._m = matcher

    def allowed(self):
        """A bool tensor over the vocabulary: the tokens the grammar allows next (on the CPU)."""
        import torch

        return torch.frombuffer(bytearray(self._m.compute_logit_bias()), dtype=torch.uint8) != 0

    def mask(self, logits):
        """`logits` (1-D) with every token the grammar forbids at -inf; a new tensor."""
        allowed = self.allowed()
        if self._m.is_error():
            raise GrammarRejected(f"the output grammar failed: {self._m.get_error()}")
        n = min(allowed.numel(), logits.numel())
        keep = allowed.new_zeros(logits.numel())
        keep[:n] = allowed[:n]
        if not bool(keep.any()):
            raise GrammarRejected("the output grammar allows no token here")
        return logits.masked_fill(~keep.to(logits.device), float("-inf"))

    def advance(self, token: int) -> bool:
        """Take the sampled token; True when the grammar is complete (nothing but the end token may follow)."""
        if not self._m.consume_token(token):
            raise GrammarRejected(f"token {token} is not allowed by the output grammar: {self._m.get_error()}")
        return bool(self._m.is_stopped())


class Grammar:
    """A compiled, checked grammar for one request; shared by its sequences, each with its own matcher."""

    def __init__(self, matcher: Any, kind: str):
        self._template, self.kind = matcher, kind

    def matcher(self) -> Matcher:
        return Matcher(self._template.deep_copy())


class Grammars:
    """The grammars of one served tokenizer. llguidance's view of the tokenizer is built on first use (~1 s, then
    kept); `compile` runs in a worker thread (the front door's), never on the engine's."""

    def __init__(self, tokenizer: Any, eos_ids: set[int], vocab_size: int):
        self.tokenizer, self.eos_ids, self.vocab_size = tokenizer, sorted(eos_ids), vocab_size
        self._lltok: Any = None
        self._lock = threading.Lock()

    def _tokenizer(self) -> Any:
        with self._lock:
            if self._lltok is None:
                import llguidance.hf

                self._lltok = llguidance.hf.from_tokenizer(self.tokenizer, n_vocab=self.vocab_size,
                                                           eos_token=self.eos_ids or None)
            return self._lltok

    def compile(self, kind: str, schema: Optional[dict[str, Any]], param: str) -> Grammar:
        """kind 'json_schema' (with `schema`) or 'json_object'. A schema llguidance cannot compile, or a tokenizer
        it cannot read, is a 400 naming `param`."""
        try:
            import llguidance
        except ImportError:
            raise ApiError(400, f"{param}: structured output needs the llguidance package on this server (the serve "
                                "extra: pip install 'llguidance>=1.7')", param=param,
                           code="unsupported_field") from None
        try:
            lltok = self._tokenizer()
        except Exception as exc:  # noqa: BLE001 - a slow tokenizer, or one llguidance cannot read
            raise ApiError(400, f"{param}: structured output is not available for this model's tokenizer "
                                f"({type(exc).__name__}: {exc})", param=param, code="unsupported_field") from None
        try:
            source = schema if kind == "json_schema" and schema is not None else ANY_OBJECT
            grammar = llguidance.LLMatcher.grammar_from_json_schema(source, defaults=JSON_OPTIONS)
            matcher = llguidance.LLMatcher(lltok, grammar, log_level=0)
        except (ValueError, TypeError) as exc:
            raise _refuse(param, str(exc)) from None
        if matcher.is_error():
            raise _refuse(param, matcher.get_error())
        return Grammar(matcher, kind)


def _refuse(param: str, reason: str) -> ApiError:
    first = " ".join(reason.split())[:300] or "unknown error"
    return ApiError(400, f"{param}: this JSON schema cannot be used for structured output: {first}", param=param,
                    code="invalid_value")

"""The typed engine event stream: what an engine produces for one chat request, in order, whatever API asked.

Each API family renders these into its own wire format (openai/render.py: chat chunks; anthropic/render.py:
Messages SSE events; responses/render.py: Responses events), so no family reads another family's bytes back.
The built-in engine emits them (builtin/backend.py: `Run.chat_events`); the vLLM relay's OpenAI stream is read
into them (openai/read.py). `index` is the choice an event belongs to (0 unless the request asked for `n`).

    Started(choices)                 the request is admitted: its choices are about to stream
    TokenLogprob(index, token, ...)  a generated token's logprob and the most likely alternatives (when asked)
    ReasoningDelta(index, text)      a piece of the model's reasoning
    TextDelta(index, text)           a piece of the answer's content
    ToolCallDelta(index, call, ...)  a tool call: `call` counts the choice's calls; id and name open it, then
                                     pieces of its arguments (a call read whole carries all three at once)
    Finish(index, reason, ...)       the choice ended: stop | length | tool_calls | ..., and the stop string
                                     that ended it (None: end of text, length, ...)
    Done(usage)                      every choice ended: the request's token usage
    Failed(error)                    generation failed mid-stream (the status line was sent already)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:
    from swiftbox.serving.errors import ApiError
    from swiftbox.serving.protocol import Usage


@dataclass(frozen=True)
class Started:
    choices: int


@dataclass(frozen=True)
class TokenLogprob:
    index: int
    token: str                                  # the token's text (or "token_id:N", as the client asked)
    logprob: float
    top: tuple[tuple[str, float], ...] = ()     # the most likely tokens at this position, best first


@dataclass(frozen=True)
class ReasoningDelta:
    index: int
    text: str


@dataclass(frozen=True)
class TextDelta:
    index: int
    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    index: int
    call: int                            # the call's place among this choice's calls (0, 1, ...)
    id: Optional[str] = None             # set where the call opens
    name: Optional[str] = None           # set where the call opens
    arguments: Optional[str] = None      # a piece of the arguments' JSON text (None: this event opens the call)

    @property
    def opens(self) -> bool:
        return self.name is not None


@dataclass(frozen=True)
class Finish:
    index: int
    reason: str
    stop_sequence: Optional[str] = None


@dataclass(frozen=True)
class Done:
    usage: Usage


@dataclass(frozen=True)
class Failed:
    error: ApiError


Event = Union[Started, TokenLogprob, ReasoningDelta, TextDelta, ToolCallDelta, Finish, Done, Failed]

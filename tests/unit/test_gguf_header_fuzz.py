"""A hypothesis fuzz of GGUF headers (issue 43, class 2): the toy model's GGUF with bytes of its header overwritten,
inserted or cut. Whatever the bytes, reading and checking the header ends quickly in either a header that passed
every check (then the tensors it lists are the ones the config's model needs, checked too) or one UserError - never
a hang, never another exception, never an allocation sized by the file's claims."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swiftbox.errors import UserError
from tests.fakes.gguf_toy import write_toy_gguf

EXAMPLES = 200
SURVIVORS: list = []
MODEL_CHECKS = 8


class Toy:
    """The toy GGUF's bytes and where its data starts (a short repr: hypothesis prints its arguments)."""

    def __init__(self, raw: bytes, data_start: int):
        self.raw, self.data_start = raw, data_start

    def __repr__(self) -> str:
        return f"Toy({len(self.raw)} bytes)"


@pytest.fixture(scope="module")
def toy_bytes(toy_dir, tmp_path_factory) -> Toy:
    from swiftbox.hub import gguf, gguf_header

    path = write_toy_gguf(toy_dir, tmp_path_factory.mktemp("fuzz") / "toy.gguf")
    gguf._config_of(path)            # transformers imported once, outside the timed examples
    return Toy(path.read_bytes(), gguf_header.read(path).data_start)


edits = st.lists(st.tuples(st.sampled_from(["set", "insert", "cut"]), st.integers(min_value=4, max_value=40_000),
                           st.binary(min_size=1, max_size=9)), min_size=1, max_size=4)
INTERESTING = [b"\xff" * 8, b"\x00" * 8, b"\x09\x00\x00\x00", b"\x08\x00\x00\x00", b"\xff\xff\xff\x7f"]


def _mutate(raw: bytes, limit: int, plan, loud) -> bytes:
    data = bytearray(raw)
    for op, at, blob in plan:
        at = at % limit
        blob = loud[len(blob) % len(loud)] if len(blob) == 9 else blob       # now and then a large number
        if op == "set":
            data[at:at + len(blob)] = blob
        elif op == "insert":
            data[at:at] = blob
        else:
            del data[at:at + len(blob)]
    return bytes(data)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(plan=edits)
def test_no_header_hangs_or_raises_anything_but_one_line(plan, toy_bytes, tmp_path_factory):
    from swiftbox.hub import gguf, gguf_header

    raw, data_start = toy_bytes.raw, toy_bytes.data_start
    path = tmp_path_factory.getbasetemp() / "fuzzed.gguf"
    path.write_bytes(_mutate(raw, data_start, plan, INTERESTING))
    began = time.perf_counter()
    try:
        try:
            header = gguf_header.read(path)
            gguf_header.check_model(header)
        finally:
            assert time.perf_counter() - began < 1.0         # the bounded part: never sized by the file's claims
        assert all(header.data_start + t.offset + t.nbytes <= header.size for t in header.tensors)
        assert len(header.meta["tokenizer.ggml.tokens"]) == len(set(header.meta["tokenizer.ggml.tokens"]))
        SURVIVORS.append(plan)
        if len(SURVIVORS) <= MODEL_CHECKS:         # transformers' side costs a second or two: a sample of them
            gguf.check_loadable(path, gguf.read_header(path))
            gguf.check_tensors(path, header, gguf._config_of(path))     # what it would build is what it holds
    except UserError as exc:
        assert "\n" not in str(exc)


def test_the_fuzz_reached_past_the_reader():
    """Some mutations keep a readable header (a changed value): the fuzz above checked those against the model."""
    assert 0 < len(SURVIVORS) < EXAMPLES

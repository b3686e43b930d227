"""`devices`: which accelerators a step uses. One type, one parser, one meaning for every step and the recipe
header (training runs under torchrun with one process per device; serve's tensor-parallel size is the
number of devices).

    2 / --devices 2            a count: two devices (ids 0,1 - or the first two of CUDA_/ASCEND_RT_VISIBLE_DEVICES)
    "0,1" / [0, 1]             explicit ids
    "3," / [3]                 one explicit id
    "2"  (a quoted string)     refused: it meant id 2 to serve and two devices to training before 0.2
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Optional, Union

from pydantic import PlainSerializer, PlainValidator

GRAMMAR = "a count (2) or device ids ('0,1', '3,' or [3])"


@dataclass(frozen=True)
class Devices:
    """A count of devices or explicit ids (exactly one of the two is set)."""

    count: Optional[int] = None
    ids: Optional[tuple[int, ...]] = None

    @property
    def n(self) -> int:
        """How many devices: the process count of a training step, serve's tensor-parallel size."""
        return self.count if self.count is not None else len(self.ids or ())

    def resolve(self) -> list[int]:
        """The ids in the (visible) device list: explicit ids as given, a count as 0..count-1."""
        return list(self.ids) if self.ids is not None else list(range(self.count or 0))

    def spelling(self) -> Union[int, str]:
        """What a recipe would say: 2 for a count, '0,1' / '3,' for ids (manifests and launch specs)."""
        if self.count is not None:
            return self.count
        ids = self.ids or ()
        return ",".join(str(i) for i in ids) + ("," if len(ids) == 1 else "")

    def __str__(self) -> str:
        return str(self.spelling())


def parse_devices(value: Any) -> Optional[Devices]:
    """The one parser (schema, CLI, recipe header). Raises ValueError with what is expected."""
    if value is None or isinstance(value, Devices):
        return value
    if isinstance(value, bool):
        raise ValueError(f"expected {GRAMMAR}, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"expected a device count of at least 1, got {value}")
        return Devices(count=value)
    if isinstance(value, (list, tuple)):
        if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise ValueError(f"expected a list of device ids like [0, 1], got {repr(value)[:80]}")
        return _ids([int(v) for v in value], value)
    if isinstance(value, str):
        text = value.strip()
        if text in ("", "auto"):
            return None
        if text.isdigit():
            raise ValueError(f"{value!r} is ambiguous: write {int(text)} (no quotes) for {int(text)} device(s), "
                             f"or '{int(text)},' / [{int(text)}] for device id {int(text)}")
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts or not all(p.isdigit() for p in parts):
            raise ValueError(f"expected {GRAMMAR}, got {value!r}")
        return _ids([int(p) for p in parts], value)
    raise ValueError(f"expected {GRAMMAR}, got {type(value).__name__}")


def parse_cli_devices(text: str) -> Union[int, str]:
    """On the command line every value is text: a bare number there is a count (`--devices 2`)."""
    return int(text) if text.strip().isdigit() else text


def _ids(ids: list[int], value: Any) -> Devices:
    if len(set(ids)) != len(ids):
        raise ValueError(f"device ids repeat in {value!r}")
    return Devices(ids=tuple(ids))


# the pydantic field type: validated by parse_devices, written back as the recipe spelling
DevicesField = Annotated[Devices, PlainValidator(parse_devices),
                         PlainSerializer(Devices.spelling, return_type=Union[int, str])]

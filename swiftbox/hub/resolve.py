"""Model references -> local directories.

`toy` builds the built-in model; a local directory passes through (after a check that it holds a
model or an adapter); anything else is a hub id handed to the download pipeline
(ModelScope by default, `hf:ORG/NAME` for Hugging Face).
"""
from __future__ import annotations

from pathlib import Path

from swiftbox.errors import UserError
from swiftbox.hub.local import check_local_model, is_local_ref

__all__ = ["check_local_model", "is_local_ref", "resolve_model"]


TOY_MAX_SEED = 2**32 - 1   # torch/numpy seeds


def resolve_model(ref: str, *, revision: str | None = None) -> Path:
    """A local directory holding the model `ref` names, fetching it if needed."""
    if not ref:
        raise UserError("model: empty model reference; expected toy, a hub id, hf:ORG/NAME or a local directory")
    if ref == "toy" or ref.startswith("toy:"):
        from swiftbox.modeling.toy import toy_path

        seed = ref.split(":", 1)[1] if ":" in ref else "0"
        if not (seed.isascii() and seed.isdigit()) or int(seed) > TOY_MAX_SEED:
            raise UserError(f"model {ref!r}: expected toy or toy:SEED with an integer seed 0..{TOY_MAX_SEED}")
        return toy_path(int(seed))
    if is_local_ref(ref):
        return check_local_model(Path(ref).expanduser())
    from swiftbox.hub.snapshot import fetch

    return fetch(ref, revision=revision)

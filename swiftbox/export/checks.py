"""The refusals an export's input can earn, all raised by the quantize step's `check` while nothing is on disk:
an adapter where a full model is needed (merge first), a model already quantized (exit 2)."""
from __future__ import annotations

from pathlib import Path

from swiftbox.artifacts import is_adapter_dir
from swiftbox.errors import UserError


def check_input(ref: str):
    """The ModelSpec of `ref`, refusing adapters (merge first) and models that are already quantized."""
    from swiftbox.hub.resolve import resolve_model
    from swiftbox.modeling.loading import resolve_spec

    path = resolve_model(ref)
    if is_adapter_dir(path):
        raise UserError(f"quantize: {ref} is an adapter, not a full model; merge first: ./launch.sh merge {ref} "
                        f"--output {Path(str(ref)).name}-merged, then ./launch.sh quantize "
                        f"{Path(str(ref)).name}-merged "
                        "(in a recipe: put a merge: {} step before quantize)")
    spec = resolve_spec(str(path))
    if spec.quantized:
        raise UserError(f"quantize: {ref} is already {spec.quantized}-quantized; quantize its un-quantized source "
                        "instead")
    return spec

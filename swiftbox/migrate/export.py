"""`./launch.sh export-config RUN --to llamafactory|axolotl|ms-swift`: a swiftbox run's step config (from its
swiftbox.json) written as the peer's config, through the same tables the importer reads.

Every export is proven before it is written: it is read back through the importer and must give the run's own
configuration; a setting the peer cannot express is refused by name (exit 2), never dropped.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

from swiftbox.errors import UserError
from swiftbox.migrate.engine import get_path
from swiftbox.migrate.table import ABSENT, MAP, Refused

# settings that only tune logging, checkpoints or where things go: not compared, not exported
HOUSEKEEPING = {"model", "output", "force", "resume", "save_steps", "logging_steps", "report_to", "max_row_chars",
                "dataset", "eval_dataset", "profile", "devices", "nnodes", "node_rank", "master_addr", "master_port"}
STEP_OF_STAGE = {"sft": "sft", "pt": "pt", "dpo": "dpo", "kto": "kto", "rm": "rm", "orpo": "dpo", "simpo": "dpo"}


def read_run(run: str) -> dict:
    """The manifest of RUN: an artifact directory, or a recipe run directory (its first training step)."""
    from swiftbox.artifacts import read_manifest

    path = Path(run)
    if (path / "swiftbox.json").is_file():
        manifest = read_manifest(path)
        if manifest is None:
            raise UserError(f"{run}: swiftbox.json cannot be read")
        return manifest
    summary = path / "summary.json"
    if summary.is_file():
        for step in json.loads(summary.read_text(encoding="utf-8")).get("steps", []):
            out = step.get("output")
            if step.get("ok") and out and (Path(out) / "swiftbox.json").is_file():
                manifest = read_manifest(Path(out))
                if manifest and manifest.get("kind") in STEP_OF_STAGE:
                    return manifest
        raise UserError(f"{run}: no finished training step in its summary.json")
    raise UserError(f"{run}: neither an artifact directory (swiftbox.json) nor a recipe run (summary.json)")


def export_config(manifest: dict, to: str, data_dir: Optional[Path] = None) -> tuple[dict, dict]:
    """(the peer's config, extra files {name: content}) for a training step's manifest."""
    from swiftbox.migrate import peers

    kind, config = manifest.get("kind"), dict(manifest.get("config") or {})
    model = manifest.get("input") or config.get("model")
    if kind not in STEP_OF_STAGE or not model:
        raise UserError(f"export-config: a {kind} step has no {to} config; export a training run (sft, pt, dpo, kto, "
                        "orpo, simpo, rm)")
    peer = peers()[to]
    out: dict[str, Any] = {}
    for key in peer.table:
        if key.how != MAP or key.to in HOUSEKEEPING or (key.kinds and kind not in key.kinds):
            continue
        value = get_path(config, key.to)
        if value is not ABSENT and value is not None:
            out[key.name] = key.inverse(value) if key.inverse else value
    if config.get("output"):
        out["output_dir"] = config["output"]
    from swiftbox.migrate import axolotl, llamafactory, ms_swift

    writer = {"llamafactory": llamafactory.export, "axolotl": axolotl.export, "ms-swift": ms_swift.export}[to]
    files = writer(kind, str(model), config, out, data_dir)
    return out, files


def check_round_trip(manifest: dict, to: str, exported: dict, base: Path) -> None:
    """Read `exported` back through the importer: it must give the run's own step config."""
    from pydantic import ValidationError

    from swiftbox.migrate import peers
    from swiftbox.migrate.engine import translate
    from swiftbox.steps import STEP_TYPES

    peer = peers()[to]
    imported = translate(peer, exported, f"the exported {peer.name} config", base=base, fetch=False)
    kind, settings = next(iter(imported.recipe["steps"][0].items()))
    if kind != manifest.get("kind"):
        raise Refused(f"export-config: the {manifest.get('kind')} step reads back as {kind} in {peer.name}")
    try:
        back = STEP_TYPES[kind].model_validate(settings).model_dump(mode="json")
    except ValidationError as exc:
        raise Refused(f"export-config: the exported {peer.name} config does not validate: {exc.errors()[0]}") from None
    own = manifest.get("config") or {}
    for key in sorted(set(own) | set(back)):
        if key in HOUSEKEEPING:
            continue
        if own.get(key) != back.get(key):
            raise Refused(f"export-config: swiftbox setting {key} = {own.get(key)!r} has no {peer.name} equivalent "
                          f"(it would read back as {back.get(key)!r}); {peer.name} cannot run this job as it is")
    mine = [str(Path(p).resolve()) for p in _specs(own.get("dataset"))]
    theirs = [str(Path(p).resolve()) for p in _specs(back.get("dataset"))]
    if mine != theirs:
        raise Refused(f"export-config: the datasets read back as {theirs} instead of {mine}")


def _specs(value: Any) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def export_cli(run: str, to: str, output: Optional[str]) -> int:
    import yaml

    manifest = read_run(run)
    target = Path(output) if output else None
    data_dir = (target.parent / f"{target.stem}_data").resolve() if target else None
    exported, files = export_config(manifest, to, data_dir)
    if files and target is None:
        raise UserError(f"export-config --to {to}: this config comes with {', '.join(files)}; give --output FILE "
                        "(they are written beside it)")
    for name, content in files.items():   # written first: the round trip reads them
        assert data_dir is not None
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / name).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    check_round_trip(manifest, to, exported, Path.cwd())
    text = yaml.safe_dump(exported, sort_keys=False, allow_unicode=True)
    if target is None:
        sys.stdout.write(text)
    else:
        target.write_text(text, encoding="utf-8")
        print(f"swiftbox: wrote {target}" + (f" and {data_dir}/" if files else ""), file=sys.stderr)
    return 0



"""Makes the menu screenshots in docs/img/: drives ./launch.sh in tmux, renders the pane to PNG.

    .venv/bin/python docs/img/screenshots.py

The pane is captured with colours (`tmux capture-pane -p -e`), parsed by rich (Text.from_ansi) and
drawn cell by cell with PIL in DejaVu Sans Mono, so the PNG shows exactly what the terminal showed.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.tmux_term import Tmux  # noqa: E402

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
BG, FG = (39, 40, 34), (220, 220, 220)
SIZE, PAD = 15, 14


def ansi_to_png(ansi: str, out: Path) -> None:
    from PIL import Image, ImageDraw, ImageFont
    from rich.text import Text

    regular = ImageFont.truetype(str(FONT_DIR / "DejaVuSansMono.ttf"), SIZE)
    bold = ImageFont.truetype(str(FONT_DIR / "DejaVuSansMono-Bold.ttf"), SIZE)
    lines = ansi.rstrip("\n").split("\n")
    while lines and not Text.from_ansi(lines[-1]).plain.strip():
        lines.pop()
    texts = [Text.from_ansi(line) for line in lines]
    cell_w = regular.getlength("M")
    ascent, descent = regular.getmetrics()
    cell_h = ascent + descent  # box-drawing glyphs span exactly this, so borders join up
    cols = max((len(t.plain.rstrip()) for t in texts), default=1)
    image = Image.new("RGB", (int(cols * cell_w) + 2 * PAD, len(texts) * cell_h + 2 * PAD), BG)
    draw = ImageDraw.Draw(image)
    for row, text in enumerate(texts):
        y = PAD + row * cell_h
        for col, char in enumerate(text.plain):
            fg, bg, is_bold = _colours(text, col)
            x = PAD + col * cell_w
            if bg:
                draw.rectangle([x, y, x + cell_w, y + cell_h], fill=bg)
            if char != " ":
                draw.text((x, y), char, font=bold if is_bold else regular, fill=fg or FG)
    image.save(out)


def _colours(text, offset: int):
    from rich.style import Style
    from rich.terminal_theme import MONOKAI

    style = Style()
    for span in text.spans:
        if span.start <= offset < span.end:
            style += span.style if isinstance(span.style, Style) else Style.parse(str(span.style))
    fg = tuple(style.color.get_truecolor(MONOKAI)) if style.color and not style.color.is_default else None
    has_bg = style.bgcolor and not style.bgcolor.is_default
    bg = tuple(style.bgcolor.get_truecolor(MONOKAI, foreground=False)) if has_bg else None
    if style.reverse:
        fg, bg = bg or BG, fg or FG
    return (tuple(fg) if fg else None), (tuple(bg) if bg else None), bool(style.bold)


def main() -> None:
    launch = str(ROOT / "launch.sh")
    with tempfile.TemporaryDirectory() as tmp:
        with Tmux(launch, cwd=Path(tmp), width=100, height=22) as term:
            term.wait_for("What would you like to do?", timeout=30)
            term.wait_for("GiB", timeout=60)
            ansi_to_png(term.screen(ansi=True), HERE / "menu-main.png")
            print("wrote", HERE / "menu-main.png")
            term.keys("C-c")
        with Tmux(launch, cwd=Path(tmp), width=100, height=40) as term:
            term.wait_for("What would you like to do?", timeout=30)
            term.wait_for("GiB", timeout=60)
            term.keys("Enter")                       # Download a model
            term.wait_for("Model to download")
            term.keys("Enter")                       # toy
            term.wait_for("Output directory")
            term.keys("Enter")
            term.wait_for("What now?")
            term.keys("Enter")                       # Run
            term.wait_for("download finished. Next?", timeout=300)
            ansi_to_png(term.screen(ansi=True), HERE / "menu-flow.png")
            print("wrote", HERE / "menu-flow.png")
            term.keys("Up", "Enter")
            term.keys("C-c")
        with Tmux(launch, cwd=ROOT, width=100, height=34) as term:  # the fine-tune questions (nothing is run)
            term.wait_for("What would you like to do?", timeout=30)
            term.wait_for("GiB", timeout=60)
            term.type("Fine")
            term.keys("Enter")
            term.wait_for("Model to fine-tune")
            term.keys("Down", "Enter")           # the first registry preset
            term.wait_for("Dataset:")
            term.keys("Enter")
            term.wait_for("Method:")
            ansi_to_png(term.screen(ansi=True), HERE / "menu-sft-method.png")
            print("wrote", HERE / "menu-sft-method.png")
            term.keys("C-c", "C-c")


if __name__ == "__main__":
    main()

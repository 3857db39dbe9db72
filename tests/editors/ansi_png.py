"""Render a terminal capture (`tmux capture-pane -e -p`: text with SGR colour codes) to PNG,
so the Neovim screenshot shows exactly the cells tmux holds, colours included."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

RGB = tuple[int, int, int]

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf")
FONT_BOLD = Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf")
# Neovim's default dark scheme, used where the capture leaves the colour to the terminal.
DEFAULT_FG: RGB = (224, 226, 234)
DEFAULT_BG: RGB = (20, 22, 27)
SGR = re.compile(r"\x1b\[([0-9;:]*)m")
BASIC: list[RGB] = [
    (0, 0, 0), (205, 49, 49), (13, 188, 121), (229, 229, 16),
    (36, 114, 200), (188, 63, 188), (17, 168, 205), (229, 229, 229),
    (102, 102, 102), (241, 76, 76), (35, 209, 139), (245, 245, 67),
    (59, 142, 234), (214, 112, 214), (41, 184, 219), (255, 255, 255),
]


def xterm_256(index: int) -> RGB:
    if index < 16:
        return BASIC[index]
    if index < 232:
        index -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return steps[index // 36], steps[(index // 6) % 6], steps[index % 6]
    level = 8 + (index - 232) * 10
    return level, level, level


@dataclass(frozen=True)
class Style:
    fg: RGB | None = None
    bg: RGB | None = None
    bold: bool = False
    reverse: bool = False


def _extended_colour(params: list[int], i: int) -> tuple[RGB | None, int]:
    """Parse `5;n` or `2;r;g;b` after a 38/48; returns the colour and the next index."""
    if i < len(params) and params[i] == 5 and i + 1 < len(params):
        return xterm_256(params[i + 1]), i + 2
    if i < len(params) and params[i] == 2 and i + 3 < len(params):
        return (params[i + 1], params[i + 2], params[i + 3]), i + 4
    return None, len(params)


def apply_sgr(style: Style, codes: str) -> Style:
    params = [int(p) if p else 0 for p in re.split(r"[;:]", codes)] if codes else [0]
    i = 0
    while i < len(params):
        code = params[i]
        i += 1
        if code == 0:
            style = Style()
        elif code == 1:
            style = replace(style, bold=True)
        elif code == 22:
            style = replace(style, bold=False)
        elif code == 7:
            style = replace(style, reverse=True)
        elif code == 27:
            style = replace(style, reverse=False)
        elif 30 <= code <= 37 or 90 <= code <= 97:
            style = replace(style, fg=BASIC[code - 30 if code < 90 else code - 82])
        elif 40 <= code <= 47 or 100 <= code <= 107:
            style = replace(style, bg=BASIC[code - 40 if code < 100 else code - 92])
        elif code in (38, 48):
            colour, i = _extended_colour(params, i)
            style = replace(style, fg=colour) if code == 38 else replace(style, bg=colour)
        elif code == 39:
            style = replace(style, fg=None)
        elif code == 49:
            style = replace(style, bg=None)
    return style


def parse(capture: str) -> list[list[tuple[str, Style]]]:
    """One list of (character, style) per line; styles carry over line ends, as in tmux."""
    rows: list[list[tuple[str, Style]]] = []
    style = Style()
    for line in capture.split("\n"):
        cells: list[tuple[str, Style]] = []
        pos = 0
        for match in SGR.finditer(line):
            cells.extend((ch, style) for ch in line[pos:match.start()])
            style = apply_sgr(style, match.group(1))
            pos = match.end()
        cells.extend((ch, style) for ch in line[pos:])
        rows.append(cells)
    return rows


def render(
    capture: str, out: Path, columns: int, rows: int, cursor: tuple[int, int] | None = None, font_size: int = 16
) -> Path:
    """Draw the cells; `cursor` (column, row) gets an insert-mode bar, as a terminal shows it."""
    font = ImageFont.truetype(str(FONT), font_size)
    bold = ImageFont.truetype(str(FONT_BOLD), font_size)
    _, top, _, bottom = font.getbbox("M")
    cell_w, cell_h = round(font.getlength("M")), round(font_size * 1.3)
    image = Image.new("RGB", (columns * cell_w, rows * cell_h), DEFAULT_BG)
    draw = ImageDraw.Draw(image)
    for y, cells in enumerate(parse(capture)[:rows]):
        for x, (ch, style) in enumerate(cells[:columns]):
            fg, bg = style.fg or DEFAULT_FG, style.bg or DEFAULT_BG
            if style.reverse:
                fg, bg = bg, fg
            box = (x * cell_w, y * cell_h, (x + 1) * cell_w, (y + 1) * cell_h)
            draw.rectangle(box, fill=bg)
            if ch.strip():
                draw.text((box[0], box[1] + (cell_h - (bottom - top)) // 2 - top), ch, fill=fg, font=bold if style.bold else font)
    if cursor is not None:
        x, y = cursor[0] * cell_w, cursor[1] * cell_h
        draw.rectangle((x, y + 1, x + 1, y + cell_h - 2), fill=DEFAULT_FG)
    image.save(out)
    return out

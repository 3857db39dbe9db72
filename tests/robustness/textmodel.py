"""The client's side of the document, written independently of lsp_server.completion.documents: LSP
positions in UTF-16 units, lines ending at \\r\\n, \\r or \\n, edits applied as an editor does."""

from __future__ import annotations

import hashlib
import random
import re

EOL = re.compile(r"\r\n|\r|\n")
ALPHABET = ["a", "b", "x", " ", "    ", "def ", "(", ")", ":", "\n", "\r\n", "\r", "\t",
            "\U0001F600", "\U0001F9EA", "\u4e2d\u6587", "\u00e9", "\u0000", "'", '"', "#"]


def lines(text: str) -> list[tuple[int, int]]:
    """(start, end) str index of each line's content."""
    out, start = [], 0
    for m in EOL.finditer(text):
        out.append((start, m.start()))
        start = m.end()
    out.append((start, len(text)))
    return out


def u16(s: str) -> int:
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def index_of(text: str, line: int, character: int) -> int:
    start, end = lines(text)[line]
    used = 0
    for i in range(start, end):
        if used == character:
            return i
        used += u16(text[i])
    assert used == character, "not a character boundary"
    return end


def random_position(rng: random.Random, text: str) -> tuple[int, int]:
    spans = lines(text)
    line = rng.randrange(len(spans))
    start, end = spans[line]
    boundary = rng.choice([start, end, rng.randint(start, end)])  # ends are favoured
    return line, u16(text[start:boundary])


def order(a: tuple[int, int], b: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    return (a, b) if a <= b else (b, a)


def random_insert(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.choice([0, 1, 1, 2, 3, 8])))


def apply(text: str, start: tuple[int, int], end: tuple[int, int], new: str) -> str:
    a, b = index_of(text, *start), index_of(text, *end)
    return text[:a] + new + text[b:]


def change(start: tuple[int, int], end: tuple[int, int], new: str) -> dict:
    return {"range": {"start": {"line": start[0], "character": start[1]},
                      "end": {"line": end[0], "character": end[1]}}, "text": new}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def invalid_edit(rng: random.Random, text: str) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """A range a desynchronised client might send: reversed, past the last line, past a line
    end, or inside a surrogate pair. None when this text offers no such range of the kind."""
    spans = lines(text)
    kind = rng.choice(["reversed", "past-last-line", "past-line-end", "mid-surrogate"])
    if kind == "reversed":
        a, b = random_position(rng, text), random_position(rng, text)
        if a == b:
            return None
        return max(a, b), min(a, b)
    if kind == "past-last-line":
        return (len(spans) + rng.randint(0, 5), 0), (len(spans) + 6, 3)
    if kind == "past-line-end":
        line = rng.randrange(len(spans))
        n = u16(text[slice(*spans[line])])
        return (line, n + rng.randint(1, 4)), (line, n + 5)
    for line, (start, end) in enumerate(spans):
        for i in range(start, end):
            if ord(text[i]) > 0xFFFF:
                char = u16(text[start:i]) + 1
                return (line, char), (line, char)
    return None

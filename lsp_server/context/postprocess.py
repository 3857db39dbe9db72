"""What the user sees of a completion: the model's text with its usual mistakes cut.

- A completion that ends by repeating the lines after the cursor is cut there
  (`trim_suffix_overlap`).
- Mid-line cursor (text follows it on its line): one line only; a second line would push
  that text down (the line stop rule of `engine.stopping`, which the policy gave it).
- Repeated lines: a model in a loop writes the same line (or the same 2-3 lines) again;
  the repetition is cut.
- Brackets the completion opens are closed or cut: the final text may not leave `(`, `[` or
  `{` open unless the text after the cursor closes it. A multi-line completion is cut back to
  its last line where every bracket it opened was closed; a single line gets its closers
  (not when it ends with the opener or a comma: arguments often go on the next lines).

`stream_text` is applied to every streamed update and only ever cuts, so each update is
a prefix of the next; `final_text` adds the bracket rule, which may add or cut at the end.
"""

from __future__ import annotations

import re

# The stop rule's own line cut and its test for a mid-line cursor (engine.stopping: text only).
from lsp_server.engine.stopping import LINE, cut, mid_line

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}
_MIN_REPEAT_CHARS = 4  # a repeated `}` or `)` line is normal code, not a loop
_MAX_PERIOD = 3
_EOL = re.compile(r"\r\n|\r|\n")


def is_blank(text: str) -> bool:
    return not text.strip()


def strip_trailing_whitespace_lines(text: str) -> str:
    """Drop the whitespace-only lines at the end, with the line break before them; the last
    line with content keeps its own trailing spaces (the user may be mid-expression)."""
    match = re.search(r"(?:\r\n|\r|\n)\s*\Z", text)
    return text[: match.start()] if match else text


def _normalize_eols(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _repeats_suffix_head(overlap: str, min_overlap: int) -> bool:
    """Whether a completion tail equal to the start of the suffix is surely a repetition: it
    crosses a line break, or is long enough not to be the one closing `)` the middle needs."""
    return "\n" in overlap or len(overlap.strip()) >= min_overlap


def _trim_exact_overlap(completion: str, suffix: str, min_overlap: int) -> str:
    """Cut the longest tail of `completion` that is also the start of `suffix`."""
    suffix = _normalize_eols(suffix)
    for start in range(len(completion)):
        overlap = completion[start:]
        if suffix.startswith(overlap) and _repeats_suffix_head(overlap, min_overlap):
            return completion[:start]
    return completion


def _is_distinctive(line: str, min_overlap: int) -> bool:
    stripped = line.strip()
    return len(stripped) >= min_overlap and any(ch.isalnum() for ch in stripped)


def _repeated_line_cut(
    completion: str, suffix: str, min_overlap: int, min_lines: int
) -> int | None:
    """Offset in `completion` of the first line that starts repeating the suffix's lines
    (those after the cursor line, blank ones skipped at the start), or None."""
    suffix_lines = _normalize_eols(suffix).split("\n")[1:]
    while suffix_lines and is_blank(suffix_lines[0]):
        suffix_lines.pop(0)
    suffix_lines = [line.rstrip() for line in suffix_lines]
    if not suffix_lines:
        return None
    lines = _normalize_eols(completion).split("\n")
    offsets = [0] + [eol.end() for eol in _EOL.finditer(completion)]
    last_content = max((i for i, line in enumerate(lines) if not is_blank(line)), default=0)
    for index in range(1, last_content + 1):
        if is_blank(lines[index]):
            continue
        matched = 0
        while (
            index + matched < len(lines)
            and matched < len(suffix_lines)
            and lines[index + matched].rstrip() == suffix_lines[matched]
        ):
            matched += 1
        needed = min(min_lines, last_content - index + 1, len(suffix_lines))
        if matched >= needed or (matched and _is_distinctive(lines[index], min_overlap)):
            return offsets[index]
    return None


def trim_suffix_overlap(
    completion: str, suffix: str, *, min_overlap: int = 4, min_lines: int = 2
) -> str:
    """Cut the completion where it starts repeating the text after the cursor.

    Two ways a model repeats the suffix:
    - its tail is exactly the start of the suffix (the rest of the cursor line, say `)\\n`,
      and maybe more lines): cut that tail when it crosses a line break or has at least
      `min_overlap` non-blank characters, since a lone `)` may be one the middle needs;
    - a later line starts a run of the suffix's next lines (compared without trailing
      whitespace): cut before it when the run is `min_lines` long, reaches the end of the
      completion, or starts with a distinctive line (not just `}` or `else:`). The suffix
      already holds the line break before that line, so the one before the cut goes too.
    """
    cut = _repeated_line_cut(completion, suffix, min_overlap, min_lines)
    if cut is None:
        return _trim_exact_overlap(completion, suffix, min_overlap)
    head = completion[:cut]
    trimmed = _trim_exact_overlap(head, suffix, min_overlap)
    return trimmed if trimmed != head else strip_trailing_whitespace_lines(head)


def single_line(completion: str) -> str:
    """The completion cut by the line stop rule (a CRLF line without its CR)."""
    return cut(completion, LINE).rstrip("\r")


def cut_repeated_lines(completion: str) -> str:
    """Cut where a block of 1-3 non-trivial lines is immediately written again."""
    lines = completion.split("\n")
    for start in range(1, len(lines)):
        for period in range(1, _MAX_PERIOD + 1):
            if start < period or start + period > len(lines):
                continue
            block, again = lines[start - period:start], lines[start:start + period]
            meaningful = sum(len(line.strip()) for line in block) >= _MIN_REPEAT_CHARS
            if meaningful and [l.rstrip() for l in block] == [l.rstrip() for l in again]:
                return "\n".join(lines[:start]).rstrip()
    return completion


def _scan(text: str) -> list[tuple[int, str]]:
    """Brackets of `text` outside string literals (one-line quotes), as (index, char)."""
    out, quote, escaped = [], "", False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote or ch == "\n":
                quote = ""
        elif ch in "\"'`":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t\n"):
            end = text.find("\n", i)  # a comment: skip to the end of the line
            quote = "\n" if end >= 0 else ""
            if end < 0:
                break
        elif ch in _OPEN or ch in _CLOSE:
            out.append((i, ch))
    return out


def unclosed(text: str) -> list[tuple[int, str]]:
    """Openers of `text` still open at its end (closers of brackets opened before it are
    ignored: they close the prefix's brackets)."""
    stack: list[tuple[int, str]] = []
    for i, ch in _scan(text):
        if ch in _OPEN:
            stack.append((i, ch))
        elif stack and stack[-1][1] == _CLOSE[ch]:
            stack.pop()
    return stack


def _closed_by_suffix(openers: list[tuple[int, str]], suffix: str) -> int:
    """How many of the innermost `openers` the suffix's first line closes, in order."""
    need = [_OPEN[ch] for _, ch in reversed(openers)]
    got = [ch for _, ch in _scan(suffix.split("\n", 1)[0]) if ch in _CLOSE]
    n = 0
    while n < len(need) and n < len(got) and need[n] == got[n]:
        n += 1
    return n


def balance_brackets(completion: str, suffix: str) -> str:
    open_ = unclosed(completion)
    open_ = open_[: len(open_) - _closed_by_suffix(open_, suffix)]
    if not open_:
        return completion
    if "\n" in completion:
        first = open_[0][0]
        cut = completion.rfind("\n", 0, first)
        if cut > 0 and completion[:cut].strip():
            return completion[:cut]
    tail = completion[open_[-1][0] + 1:].rstrip()
    if not tail or tail.endswith(","):
        return completion  # `foo(` or `foo(a,`: the arguments go on below, as code often does
    return completion + "".join(_OPEN[ch] for _, ch in reversed(open_))


def _hold_back_repeat(text: str) -> str:
    """A streamed last line that so far repeats the line above may become a repetition:
    do not show it yet (so later updates never take back text already shown)."""
    head, _, last = text.rpartition("\n")
    above = head.rpartition("\n")[2]
    if head and last.strip() and above.rstrip().startswith(last.rstrip()):
        return head
    return text


def stream_text(completion: str, suffix: str, partial: bool = True) -> str:
    """Every update: suffix repetition, mid-line single line, repeated lines (cuts only)."""
    text = trim_suffix_overlap(completion, suffix)
    if mid_line(suffix):
        text = single_line(text)
    text = cut_repeated_lines(text)
    return strip_trailing_whitespace_lines(_hold_back_repeat(text) if partial else text)


def final_text(completion: str, suffix: str) -> str:
    """The answer: `stream_text` plus the bracket rule."""
    text = stream_text(completion, suffix, partial=False)
    return strip_trailing_whitespace_lines(balance_brackets(text, suffix)) if text.strip() else text

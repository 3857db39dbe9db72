"""The first (short) window starts on a finer grid than the whole window, so it holds about
its budget; later prompts keep its start, so typing still only grows the prompt at its end."""

from __future__ import annotations

import re
import textwrap
import zlib
from dataclasses import replace
from pathlib import Path

from lsp_server.context.prompt import ContextBudget, FimTokens, build_fim_prompt

FIM = FimTokens(prefix=-1, suffix=-2, middle=-3)
_PIECES = re.compile(r" ?\w{1,4}|\s+|[^\w\s]")
SOURCE = Path(textwrap.__file__).read_text(encoding="utf-8")
LINE_STARTS = [0, *(m.end() for m in re.finditer(r"\n", SOURCE))]
SHORT = ContextBudget(prefix_tokens=1024, suffix_tokens=64, first_prefix_tokens=160)
COARSE = replace(SHORT, first_block_lines=SHORT.block_lines)  # the grid before issue 48
# Cursors at line starts and mid-line, spread over the file below its first 1,024 tokens.
CURSORS = [LINE_STARTS[line] + shift for line in range(80, len(LINE_STARTS) - 1, 23) for shift in (0, 9)]


def bpe_like(text: str) -> list[int]:
    """A stand-in tokenizer: appending text only changes the last tokens."""
    return [zlib.crc32(piece.encode()) % 100_000 for piece in _PIECES.findall(text)]


def prompt(offset: int, budget: ContextBudget = SHORT, anchor: tuple[int, int] | None = None,
           prefix: str | None = None):
    prefix = SOURCE[:offset] if prefix is None else prefix
    return build_fim_prompt(prefix, SOURCE[offset:], bpe_like, FIM, budget, "spm", *(anchor or (None, None)))


def tokens_from(prefix: str, line: int) -> int:
    """What the window from `line` to the cursor costs, counted as the meter counts it."""
    cursor_line = prefix.rfind("\n") + 1
    return len(bpe_like(prefix[LINE_STARTS[line]:cursor_line])) + len(bpe_like(prefix[cursor_line:]))


def test_the_first_window_starts_at_the_earliest_line_whose_tail_fits():
    for offset in CURSORS:
        first = prompt(offset)
        assert first.window_line is not None and first.window_line > 0
        assert first.prefix_start == LINE_STARTS[first.window_line]
        assert tokens_from(SOURCE[:offset], first.window_line) <= SHORT.first_prefix_tokens
        assert tokens_from(SOURCE[:offset], first.window_line - 1) > SHORT.first_prefix_tokens


def test_the_first_window_holds_at_least_what_the_coarse_grid_gave_and_mostly_more():
    fine = [prompt(offset).prefix_tokens for offset in CURSORS]
    coarse = [prompt(offset, COARSE).prefix_tokens for offset in CURSORS]
    assert all(f >= c for f, c in zip(fine, coarse))
    assert sum(fine) > 1.2 * sum(coarse)
    assert sorted(fine)[len(fine) // 10] >= 0.75 * SHORT.first_prefix_tokens  # p10: a line under it


def test_a_whole_window_stays_on_the_coarse_grid():
    # A grow warm (first_prefix_tokens == prefix_tokens) and a budget without a short window.
    for budget in (replace(SHORT, prefix_tokens=400, first_prefix_tokens=400), ContextBudget(400, 64)):
        for offset in CURSORS:
            line = prompt(offset, budget).window_line
            assert line is not None and line % budget.block_lines == 0


def test_typing_and_backspacing_after_the_first_prompt_keep_its_start():
    for offset in CURSORS[::4]:
        first = prompt(offset)
        anchor = (first.window_line, first.prefix_tokens)
        typed = "value = compute(width, height)"
        states = [SOURCE[:offset] + typed[:count] for count in range(0, len(typed) + 1, 3)]
        states += [SOURCE[:offset - count] for count in range(1, 6)]  # backspace into the code
        for prefix in states:
            later = prompt(offset, anchor=anchor, prefix=prefix)
            assert later.window_line == first.window_line
            anchor = (later.window_line, later.prefix_tokens)


def test_a_grow_over_a_fine_start_moves_to_the_coarse_grid():
    offset = CURSORS[len(CURSORS) // 2]
    first = prompt(offset)
    whole = replace(SHORT, first_prefix_tokens=SHORT.prefix_tokens)
    grown = prompt(offset, whole, (first.window_line, first.prefix_tokens))
    assert grown.window_line % SHORT.block_lines == 0 and grown.window_line < first.window_line

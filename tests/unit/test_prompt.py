"""FIM prompt windows within a token budget, and stability while typing."""

from __future__ import annotations

import re
import textwrap
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsp_server.context.prompt import (
    MIN_FIRST_TOKENS,
    QWEN_FIM,
    ContextBudget,
    FimTokens,
    build_fim_prompt,
    first_window_tokens,
)
from lsp_server.engine.types import common_prefix_len  # what the KV cache reuses

FIM = FimTokens(prefix=-1, suffix=-2, middle=-3)  # ids no text token can have
_PIECES = re.compile(r" ?\w{1,4}|\s+|[^\w\s]")
# Real code, the same on every machine that runs the tests.
SOURCE = Path(textwrap.__file__).read_text(encoding="utf-8")


def bpe_like(text: str) -> list[int]:
    """A stand-in tokenizer with BPE's relevant habit: appending text only changes the
    last tokens. About 3 characters per token on code."""
    return [zlib.crc32(piece.encode()) % 100_000 for piece in _PIECES.findall(text)]


def byte_tokens(text: str) -> list[int]:
    return list(text.encode("utf-8"))


class CountingEncoder:
    def __init__(self, encode=bpe_like) -> None:
        self.encode, self.lengths = encode, []

    def __call__(self, text: str) -> list[int]:
        self.lengths.append(len(text))
        return self.encode(text)


def line_index(text: str, offset: int) -> int:
    return len(re.findall(r"\r\n|\r|\n", text[:offset]))


def cursor_in_middle_of_source() -> int:
    """Mid-line, inside a function body, about halfway down the file."""
    line_start = SOURCE.index("\n", len(SOURCE) // 2) + 1
    return SOURCE.index("(", line_start) + 1


# --- layout ------------------------------------------------------------------------------


def test_small_context_is_kept_whole_in_psm_order():
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    prompt = build_fim_prompt(prefix, suffix, bpe_like, FIM, ContextBudget(), "psm")
    assert prompt.ids == [-1, *bpe_like(prefix), -2, *bpe_like(suffix), -3]
    assert (prompt.prefix, prompt.suffix) == (prefix, suffix)
    assert (prompt.prefix_start, prompt.suffix_end) == (0, len(suffix))
    assert len(prompt.ids) == prompt.prefix_tokens + prompt.suffix_tokens + 3
    assert prompt.suffix_ids == tuple(bpe_like(suffix))  # what a free draft must not write again


def test_spm_order_puts_the_suffix_first():
    prefix, suffix = "x = [", "]\n"
    prompt = build_fim_prompt(prefix, suffix, bpe_like, FIM, ContextBudget(), "spm")
    assert prompt.ids == [-2, *bpe_like(suffix), -1, *bpe_like(prefix), -3]
    assert prompt.suffix_ids == tuple(bpe_like(suffix))


def test_qwen_fim_token_ids():
    assert (QWEN_FIM.prefix, QWEN_FIM.suffix, QWEN_FIM.middle) == (151659, 151661, 151660)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="psm"):
        build_fim_prompt("a", "b", bpe_like, FIM, ContextBudget(), "pms")  # type: ignore[arg-type]


def test_zero_budgets_give_empty_windows():
    prompt = build_fim_prompt("abc\n", "def\n", bpe_like, FIM, ContextBudget(0, 0), "psm")
    assert prompt.ids == [-1, -2, -3] and prompt.prefix == prompt.suffix == ""


# --- windows ----------------------------------------------------------------------------


def test_prefix_window_keeps_the_code_nearest_the_cursor_from_a_grid_line():
    cursor = cursor_in_middle_of_source()
    prefix, suffix = SOURCE[:cursor], SOURCE[cursor:]
    budget = ContextBudget(prefix_tokens=400, suffix_tokens=100, block_lines=8)
    prompt = build_fim_prompt(prefix, suffix, bpe_like, FIM, budget, "psm")
    assert prefix.endswith(prompt.prefix) and prompt.prefix_start > 0
    assert prompt.prefix_tokens == len(bpe_like(prompt.prefix)) <= 400
    assert prefix[prompt.prefix_start - 1] == "\n"
    start_line = line_index(prefix, prompt.prefix_start)
    assert start_line % 8 == 0
    # One more block would not have fitted: the window is as large as the grid allows.
    earlier = prefix.splitlines(keepends=True)[start_line - 8:start_line]
    assert len(bpe_like("".join(earlier) + prompt.prefix)) > 400


def test_suffix_window_ends_after_the_last_whole_line_that_fits():
    cursor = cursor_in_middle_of_source()
    suffix = SOURCE[cursor:]
    budget = ContextBudget(prefix_tokens=50, suffix_tokens=120)
    prompt = build_fim_prompt(SOURCE[:cursor], suffix, bpe_like, FIM, budget, "psm")
    assert suffix.startswith(prompt.suffix) and prompt.suffix.endswith("\n")
    assert prompt.suffix_tokens == len(bpe_like(prompt.suffix)) <= 120
    next_line_end = suffix.index("\n", prompt.suffix_end) + 1
    assert len(bpe_like(suffix[:next_line_end])) > 120


def test_a_line_longer_than_the_budget_is_cut_on_a_character_boundary():
    line = "s = '" + ("\U0001F600中é" * 200) + "'"
    prefix, suffix = "import os\n" + line[:500], line[500:] + "\nprint(s)\n"
    budget = ContextBudget(prefix_tokens=101, suffix_tokens=53)
    prompt = build_fim_prompt(prefix, suffix, byte_tokens, FIM, budget, "psm")
    assert prefix.endswith(prompt.prefix) and suffix.startswith(prompt.suffix)
    assert 101 - 4 < prompt.prefix_tokens <= 101 and 53 - 4 < prompt.suffix_tokens <= 53
    # Byte tokens decode back to the exact text: no character was split.
    prefix_bytes = bytes(prompt.ids[1:1 + prompt.prefix_tokens])
    assert prefix_bytes.decode("utf-8") == prompt.prefix


def code_texts(*extra: str):
    """Short documents of code-ish pieces, line breaks of every kind, multi-byte characters."""
    pieces = list("ab (){}:=\n\r\t") + ["\U0001F600", "中", "\r\n", *extra]
    return st.lists(st.sampled_from(pieces), max_size=400).map("".join)


# A cursor anywhere in the text, budgets from nothing to a few dozen tokens, both encoders.
WINDOW_CASES = dict(cursor=st.floats(0, 1), prefix_tokens=st.integers(0, 80),
                    suffix_tokens=st.integers(0, 40), encode=st.sampled_from([bpe_like, byte_tokens]))


@settings(max_examples=150, deadline=None)
@given(text=code_texts(), block_lines=st.integers(1, 6), **WINDOW_CASES)
def test_windows_are_tail_and_head_within_budget(
    text, cursor, prefix_tokens, suffix_tokens, block_lines, encode
):
    at = int(cursor * len(text))
    prefix, suffix = text[:at], text[at:]
    budget = ContextBudget(prefix_tokens, suffix_tokens, block_lines)
    prompt = build_fim_prompt(prefix, suffix, encode, FIM, budget, "spm")
    assert prompt.prefix == prefix[prompt.prefix_start:]
    assert prompt.suffix == suffix[:prompt.suffix_end]
    assert prompt.prefix_tokens == len(encode(prompt.prefix)) <= prefix_tokens
    assert prompt.suffix_tokens == len(encode(prompt.suffix)) <= suffix_tokens
    if len(encode(prefix)) <= prefix_tokens:
        assert prompt.prefix == prefix
    if len(encode(suffix)) <= suffix_tokens:
        assert prompt.suffix == suffix


# --- stability while typing ------------------------------------------------------------


def prompts_while_typing(typed: str, mode: str) -> list[list[int]]:
    cursor = cursor_in_middle_of_source()
    prompts = []
    for count in range(len(typed) + 1):
        prefix = SOURCE[:cursor] + typed[:count]
        prompt = build_fim_prompt(prefix, SOURCE[cursor:], bpe_like, FIM, ContextBudget(), mode)
        prompts.append(prompt.ids)
    return prompts


def test_typing_twenty_characters_keeps_over_90_percent_of_the_spm_prompt():
    prompts = prompts_while_typing("value, width=70) + 1", "spm")
    for before, after in zip(prompts, prompts[1:]):
        assert common_prefix_len(before, after) > 0.9 * len(before)
    assert common_prefix_len(prompts[0], prompts[-1]) > 0.9 * len(prompts[0])


def test_psm_order_shares_less_with_the_previous_prompt_than_spm():
    typed = "value, width=70) + 1"
    spm, psm = prompts_while_typing(typed, "spm"), prompts_while_typing(typed, "psm")
    spm_shared = common_prefix_len(spm[0], spm[-1]) / len(spm[0])
    psm_shared = common_prefix_len(psm[0], psm[-1]) / len(psm[0])
    assert psm_shared < 0.9 < spm_shared


def test_window_start_moves_by_whole_blocks_and_rarely():
    cursor = cursor_in_middle_of_source()
    typed = "        result = helper(value)\n" * 40  # two or three blocks' worth of tokens
    starts = []
    for count in range(0, len(typed) + 1, 3):
        prefix = SOURCE[:cursor] + typed[:count]
        prompt = build_fim_prompt(prefix, "", bpe_like, FIM, ContextBudget(), "spm")
        starts.append(prompt.prefix_start)
    moves = [(a, b) for a, b in zip(starts, starts[1:]) if a != b]
    # Sliding line by line would move the start about once per typed line (40 times).
    assert 1 <= len(moves) <= 4
    for a, b in moves:
        dropped = line_index(SOURCE, b) - line_index(SOURCE, a)
        assert dropped > 0 and dropped % ContextBudget().block_lines == 0


# --- cost of counting ---------------------------------------------------------------------


def test_token_counting_encodes_only_near_the_boundary():
    big = SOURCE * 40  # ~20,000 lines
    cursor = len(big) // 2
    encoder = CountingEncoder()
    prompt = build_fim_prompt(big[:cursor], big[cursor:], encoder, FIM, ContextBudget(), "spm")
    window = len(prompt.prefix) + len(prompt.suffix)
    assert len(encoder.lengths) <= 8
    assert sum(encoder.lengths) < 4 * window
    assert max(encoder.lengths) < 3 * len(prompt.prefix)


def test_minified_line_far_denser_than_guessed_is_counted_with_few_encodes():
    minified = "x=1;" * 100_000  # one token per character in byte tokens
    encoder = CountingEncoder(byte_tokens)
    prompt = build_fim_prompt(minified[:200_000], minified[200_000:], encoder, FIM,
                              ContextBudget(), "spm")
    assert (prompt.prefix_tokens, prompt.suffix_tokens) == (1024, 256)
    assert len(encoder.lengths) <= 8


def test_a_keystroke_encodes_little_anew_when_the_encoder_remembers():
    seen: dict[str, list[int]] = {}
    new: list[int] = []  # lengths of the pieces the encode cache could not answer

    def cached(text: str) -> list[int]:
        if text not in seen:
            new.append(len(text))
            seen[text] = bpe_like(text)
        return seen[text]

    cursor = cursor_in_middle_of_source()
    for typed in ("", "v", "va", "val"):
        new.clear()
        prompt = build_fim_prompt(SOURCE[:cursor] + typed, SOURCE[cursor:], cached, FIM,
                                  ContextBudget(), "psm-line")
        if typed:  # the lines above the cursor line and the suffix come from the cache
            assert sum(new) < len(prompt.prefix) / 2, new


def test_small_files_need_one_encode_per_side():
    encoder = CountingEncoder()
    build_fim_prompt("x = 1\n" * 20, "y = 2\n" * 5, encoder, FIM, ContextBudget(), "psm")
    assert len(encoder.lengths) == 2


def test_source_fixture_is_long_enough_to_need_a_window():
    assert len(bpe_like(SOURCE)) > ContextBudget().prefix_tokens + ContextBudget().suffix_tokens


# --- psm-line: the lines around the cursor open the middle ---------------------------------


def block_start_offset(text: str, line: int) -> int:
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    return starts[line]


@pytest.mark.parametrize("encode", [bpe_like, byte_tokens])
def test_psm_line_opens_the_middle_with_the_lines_since_the_grid_line(encode):
    cursor = cursor_in_middle_of_source()
    prefix, suffix = SOURCE[:cursor], SOURCE[cursor:]
    budget = ContextBudget()
    prompt = build_fim_prompt(prefix, suffix, encode, FIM, budget, "psm-line")
    grid_line = line_index(SOURCE, cursor) // budget.middle_lines * budget.middle_lines
    opening = prefix[block_start_offset(SOURCE, grid_line):]
    s, m = prompt.ids.index(FIM.suffix), prompt.ids.index(FIM.middle)
    assert prompt.ids[0] == FIM.prefix and s < m
    assert prompt.ids[1:s] == encode(prefix[prompt.prefix_start:len(prefix) - len(opening)])
    assert prompt.ids[s + 1:m] == encode(prompt.suffix)
    # The middle holds the opening lines but their last token, which the model re-spells.
    assert opening.endswith(prompt.heal) and prompt.heal
    assert prompt.ids[m + 1:] == encode(opening[:len(opening) - len(prompt.heal)])


def test_psm_line_heals_trailing_space_where_the_next_word_would_start():
    # The stand-in tokenizer keeps a space with the word after it: " x".
    prompt = build_fim_prompt("a = 1\nreturn ", "\n", bpe_like, FIM, ContextBudget(), "psm-line")
    assert prompt.heal == " "
    assert prompt.ids[prompt.ids.index(FIM.middle) + 1:] == bpe_like("a = 1\nreturn")


def test_typing_lines_within_a_block_keeps_the_psm_line_prompt_a_growing_prefix():
    start = block_start_offset(SOURCE, 256)  # a grid line for any middle_lines dividing 256
    typed = "    total = 0\n    for item in items:\n        total += item\n"
    prompts = []
    for count in range(len(typed) + 1):
        prefix = SOURCE[:start] + typed[:count]
        prompts.append(build_fim_prompt(prefix, SOURCE[start:], bpe_like, FIM, ContextBudget(), "psm-line").ids)
    for before, after in zip(prompts, prompts[1:]):
        # All but the last few tokens stay: new lines included, the suffix is never re-fed.
        assert common_prefix_len(before, after) >= len(before) - 3


@settings(max_examples=150, deadline=None)
@given(text=code_texts("    "), middle_lines=st.integers(1, 6), **WINDOW_CASES)
def test_psm_line_splits_the_same_window_into_prefix_and_middle(
    text, cursor, prefix_tokens, suffix_tokens, middle_lines, encode
):
    at = int(cursor * len(text))
    prefix, suffix = text[:at], text[at:]
    budget = ContextBudget(prefix_tokens, suffix_tokens, middle_lines=middle_lines)
    psm = build_fim_prompt(prefix, suffix, encode, FIM, budget, "psm")
    line = build_fim_prompt(prefix, suffix, encode, FIM, budget, "psm-line")
    assert (line.prefix, line.suffix, line.prefix_start) == (psm.prefix, psm.suffix, psm.prefix_start)
    s, m = line.ids.index(FIM.suffix), line.ids.index(FIM.middle)
    head = line.ids[1:s]
    # The window's text = what the prefix part encodes + the middle's opening + the healed text.
    cut = len(line.prefix) - next(n for n in range(len(line.prefix) + 1)
                                  if encode(line.prefix[:len(line.prefix) - n]) == head)
    opening = line.prefix[cut:]
    assert opening.endswith(line.heal)
    assert line.ids[m + 1:] == encode(opening[:len(opening) - len(line.heal)])
    assert line.ids[s + 1:m] == encode(line.suffix)
    # Splitting the window at a line start can cost one token over the budget.
    assert line.prefix_tokens <= max(prefix_tokens, 0) + 1


# --- a short first window that grows (the first suggestion in a file) ---------------------

SHORT_FIRST = ContextBudget(prefix_tokens=1024, suffix_tokens=64, first_prefix_tokens=256)


def prompt_at(offset: int, anchor: int | None, budget: ContextBudget = SHORT_FIRST):
    return build_fim_prompt(SOURCE[:offset], SOURCE[offset:], bpe_like, FIM, budget, "psm-line", anchor)


def line_offset(line: int) -> int:
    return [0, *(m.end() for m in re.finditer(r"\n", SOURCE))][line]


def test_a_first_prompt_gets_the_short_window_from_a_line_start():
    first = prompt_at(cursor_in_middle_of_source(), None)
    assert first.window_line is not None
    assert first.prefix_start == line_offset(first.window_line)
    assert 256 - 32 <= first.prefix_tokens <= 256 + 1  # about a line under it, never over
    assert first.prefix_tokens < prompt_at(cursor_in_middle_of_source(), None, ContextBudget(
        prefix_tokens=1024, suffix_tokens=64)).prefix_tokens


def test_moving_down_keeps_the_start_and_the_earlier_prompt_stays_a_prefix():
    cursor = line_offset(line_index(SOURCE, cursor_in_middle_of_source()))
    first = prompt_at(cursor, None)
    lower = prompt_at(line_offset(line_index(SOURCE, cursor) + 20), first.window_line)
    assert lower.window_line == first.window_line
    assert lower.prefix_tokens > first.prefix_tokens  # the window grew at its end
    # Everything up to the first prompt's middle lines is reused (psm-line: <fim_prefix> + window).
    shared = common_prefix_len(first.ids, lower.ids)
    assert shared >= first.ids.index(FIM.suffix) - 1 - 8 * 12  # at most the middle's lines differ


def test_a_window_that_outgrows_the_budget_or_a_cursor_above_it_starts_a_new_short_one():
    start_line = line_index(SOURCE, cursor_in_middle_of_source())
    first = prompt_at(line_offset(start_line), None)
    far = prompt_at(line_offset(start_line + 150), first.window_line)  # >1024 tokens below
    assert far.window_line != first.window_line and far.prefix_tokens <= 257
    above = prompt_at(line_offset(first.window_line - 30), first.window_line)
    assert above.window_line < first.window_line and above.prefix_tokens <= 257


def test_an_anchor_is_kept_only_where_its_window_holds_at_least_a_fresh_one_on_the_coarse_grid():
    start_line = line_index(SOURCE, cursor_in_middle_of_source())
    anchor = prompt_at(line_offset(start_line), None).window_line
    coarse = replace(SHORT_FIRST, first_block_lines=SHORT_FIRST.block_lines)
    for line in range(anchor + 1, start_line + 40, 3):
        fresh, kept = prompt_at(line_offset(line), None), prompt_at(line_offset(line), anchor)
        fresh_coarse = prompt_at(line_offset(line), None, coarse)
        held = line_offset(anchor) <= fresh_coarse.prefix_start
        assert kept.prefix_start == (line_offset(anchor) if held else fresh.prefix_start)
        assert kept.prefix_tokens >= fresh_coarse.prefix_tokens


@given(st.integers(min_value=0, max_value=len(SOURCE)), st.integers(min_value=-5, max_value=5000))
@settings(max_examples=60, deadline=None)
def test_any_anchor_gives_a_window_within_the_budget(offset, anchor):
    prompt = prompt_at(offset, anchor)
    assert prompt.prefix_tokens <= SHORT_FIRST.prefix_tokens + 1
    if prompt.window_line is not None:
        assert prompt.prefix_start == line_offset(prompt.window_line)


def test_a_jump_far_down_starts_a_short_window_rather_than_refill_the_gap():
    start_line = line_index(SOURCE, cursor_in_middle_of_source())
    first = prompt_at(line_offset(start_line), None)
    # 40 lines down the window from the old start would still fit 1,024 tokens, but the
    # tokens between would all be new: more than a fresh short window costs.
    far = build_fim_prompt(SOURCE[:line_offset(start_line + 40)], SOURCE[line_offset(start_line + 40):],
                           bpe_like, FIM, SHORT_FIRST, "psm-line", first.window_line, first.prefix_tokens)
    assert far.window_line > first.window_line and far.prefix_tokens <= 257
    typed = build_fim_prompt(SOURCE[:line_offset(start_line + 2)], SOURCE[line_offset(start_line + 2):],
                             bpe_like, FIM, SHORT_FIRST, "psm-line", first.window_line, first.prefix_tokens)
    assert typed.window_line == first.window_line  # two lines more: the same start


def test_the_first_window_is_what_the_prefill_rate_fills_in_the_time_given():
    # 2.5 s at 10 ms a token: 250 tokens, less a 64-token suffix, down to a step of 32.
    assert first_window_tokens(320, 2.5, 0.010, 64) == 160
    assert first_window_tokens(320, 2.5, 0.005, 64) == 320  # faster: the setting caps it
    assert first_window_tokens(320, 2.5, 0.100, 64) == MIN_FIRST_TOKENS  # never below a few lines
    assert first_window_tokens(320, 0.0, 0.010, 64) == 320  # off
    assert first_window_tokens(320, 2.5, None, 64) == 320  # no timing (a remote server)
    # A rate that drifts a little keeps the size, so a warmed window keeps its start.
    assert first_window_tokens(320, 2.5, 0.0101, 64) == first_window_tokens(320, 2.5, 0.0099, 64)

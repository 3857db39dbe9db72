"""Fill-in-the-middle prompts within a token budget (the clean-up of completions is postprocess.py).

Tokenizer-agnostic: callers pass `encode(text) -> ids` (it should not turn text that merely
looks like `<|fim_prefix|>` into special tokens; with transformers use
`split_special_tokens=True`) and the model's FIM token ids.

Two things shape the window:
- Nearest code wins. The prefix keeps its tail and the suffix its head, cut at line
  boundaries. Only when no more than the cursor line fits is a line cut inside, on a str
  index, so never inside a code point.
- KV-cache reuse. The prefix window starts on a coarse grid of lines counted from the top
  of the file (every `block_lines`-th line). A document's first prompt in a region gets a
  short window (`first_prefix_tokens`: the earliest line of a finer grid, every
  `first_block_lines`-th, whose tail fits it), so the first suggestion after opening a file
  or jumping waits for few tokens and still gets about all of them; the caller passes that
  start back (`anchor_line`, with the window's size then: `anchor_tokens`) and later
  prompts keep it while the window from it holds at least what a short window on the
  coarse grid would, fits `prefix_tokens` and has grown by no more than a short window
  would cost: it grows at its end as the user types or moves down, and what was computed
  for it stays valid (held against the fine grid, a backspace or a line up would often
  start anew). A window that would outgrow either, shrink below that, or a cursor above its
  start, starts a new short one. In SPM order
  (`<fim_suffix>{suffix}<fim_prefix>{prefix}<fim_middle>`) typing only grows the prompt near
  its end, so consecutive prompts share all but their last few tokens and the engine
  re-prefills only those. In PSM order everything after the cursor is re-prefilled on each
  keystroke. Which order the model completes better is for the benchmarks to say.
- `psm-line` is PSM with the lines around the cursor moved from the prefix to the start of
  the middle: `<fim_prefix>{prefix up to a grid line}<fim_suffix>{suffix}<fim_middle>{from
  that line to the cursor}`, the grid being every `middle_lines`-th line from the top. The
  model continues the middle it was handed, and typing (new lines included) only grows the
  prompt at its end, as in SPM, while the model still sees the order it was trained on;
  only crossing a grid line re-prefills the suffix window. The middle's last token is cut
  and healed (`heal`): the model would otherwise continue from a token boundary it rarely
  saw there (after a lone `" "` it writes `" False"`, one space too many).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence, get_args

Encode = Callable[[str], list[int]]
FimMode = Literal["psm", "spm", "psm-line"]
FIM_MODES: tuple[str, ...] = get_args(FimMode)

_EOL = re.compile(r"\r\n|\r|\n")
# A piece averaging more characters per token than this is taken not to fit, without
# encoding it: it keeps huge files from being encoded whole.
_MAX_CHARS_PER_TOKEN = 16.0
# Starting guess of characters per token for code, corrected by measurements of at least
# `_MIN_SAMPLE_TOKENS` tokens.
_CHARS_PER_TOKEN_GUESS = 3.5
_MIN_SAMPLE_TOKENS = 32


@dataclass(frozen=True)
class FimTokens:
    prefix: int
    suffix: int
    middle: int


# Qwen2.5-Coder: <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>.
QWEN_FIM = FimTokens(prefix=151659, suffix=151661, middle=151660)


@dataclass(frozen=True)
class ContextBudget:
    prefix_tokens: int = 1024
    suffix_tokens: int = 256
    # The prefix window starts on every `block_lines`-th line of the file.
    block_lines: int = 16
    # A short window (first_prefix_tokens) starts on every `first_block_lines`-th line: on
    # the 16-line grid a 160-token window held p50 60 %, p10 16 % of its budget, on every line
    # 96 % and 91 % (Qwen2.5-Coder tokenizer, 385 spots of bench/quality_spots). Later prompts
    # keep its start (the anchor), so the finer grid costs no reuse while typing.
    first_block_lines: int = 1
    # psm-line: the middle opens with the lines since every `middle_lines`-th line.
    middle_lines: int = 8
    # The window a prompt gets where it cannot keep an earlier start (0: prefix_tokens).
    first_prefix_tokens: int = 0


# The shortest first window a prefill rate sizes (a few lines of code before the cursor),
# and the step its size moves by, so a rate that drifts a little keeps the same size.
MIN_FIRST_TOKENS = 64
FIRST_TOKENS_STEP = 32


def first_window_tokens(most: int, seconds: float, token_s: float | None, suffix_tokens: int) -> int:
    """The first window's prefix tokens: what `seconds` of prefill at `token_s` a token holds
    once the suffix window is in, at most `most` (`token_s` None or `seconds` 0: `most`)."""
    if not seconds or not token_s:
        return most
    fits = int(seconds / token_s) - suffix_tokens
    return min(most, max(MIN_FIRST_TOKENS, fits // FIRST_TOKENS_STEP * FIRST_TOKENS_STEP))


@dataclass(frozen=True)
class FimPrompt:
    ids: list[int]
    prefix: str  # the prefix text in the prompt: a tail of the given prefix
    suffix: str  # the suffix text in the prompt: a head of the given suffix
    prefix_tokens: int
    suffix_tokens: int
    mode: FimMode
    prefix_start: int  # where `prefix` starts in the given prefix (0: nothing dropped)
    suffix_end: int  # where `suffix` ends in the given suffix
    # psm-line: the text of the cursor line's last token, cut from the prompt; the output
    # must start with it (engine.healing) and it is not shown.
    heal: str = ""
    # The line (from the top of the given prefix) the window starts at, when it starts on
    # one: the `anchor_line` to pass for the next prompt of the same document.
    window_line: int | None = None
    suffix_ids: tuple[int, ...] = ()  # the suffix as the prompt holds it


@dataclass
class _Meter:
    """Counts tokens against one budget, encoding as little as it can."""

    encode: Encode
    budget: int
    chars_per_token: float = _CHARS_PER_TOKEN_GUESS
    _ids: dict[str, list[int]] = field(default_factory=dict)
    _sampled: bool = False

    def fits(self, *parts: str) -> bool:
        """Whether `parts` encoded one after the other fit the budget."""
        chars = sum(map(len, parts))
        # Every token covers at least one UTF-8 byte (byte-level BPE, byte fallback), so a
        # piece with no more bytes than the budget fits without encoding it.
        if chars <= self.budget and sum(len(p.encode("utf-8", "surrogatepass")) for p in parts) <= self.budget:
            return True
        if chars > self.reach():
            return False
        return sum(len(self.ids(p)) for p in parts if p) <= self.budget

    def ids(self, piece: str) -> list[int]:
        if piece not in self._ids:
            ids = self.encode(piece)
            # Tiny pieces (a short cursor line) say little about the file's density.
            if len(ids) >= _MIN_SAMPLE_TOKENS or (ids and not self._sampled):
                self.chars_per_token, self._sampled = len(piece) / len(ids), True
            self._ids[piece] = ids
        return self._ids[piece]

    def estimated_chars(self) -> float:
        return self.budget * self.chars_per_token

    def reach(self) -> int:
        """No piece longer than this many characters can fit."""
        return int(self.budget * _MAX_CHARS_PER_TOKEN)


def _first_true(count: int, pred: Callable[[int], bool], guess: int) -> int:
    """Smallest i in [0, count) with pred(i), for pred monotone (False... True...) with
    pred(count - 1) True. Gallops out from `guess`, so a good guess costs about two calls."""
    guess = min(max(guess, 0), count - 1)
    if pred(guess):
        hi, lo, step = guess, guess - 1, 1
        while lo >= 0 and pred(lo):
            hi, step = lo, step * 2
            lo = hi - step
        lo = max(lo, -1)
    else:
        lo, hi, step = guess, guess + 1, 1
        while hi < count - 1 and not pred(hi):
            lo, step = hi, step * 2
            hi = lo + step
        hi = min(hi, count - 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _most_context(
    cuts: Sequence[int], size: Callable[[int], int], piece: Callable[[int], tuple[str, ...]],
    meter: _Meter,
) -> int | None:
    """The cut in `cuts` (ordered from most to least context) keeping the most text that
    fits, or None when even the last does not; `piece(cut)` is the kept text, in parts
    counted apart. Sizes in characters give the first guess; only pieces near the
    boundary are encoded."""
    if not cuts or not meter.fits(*piece(cuts[-1])):
        return None
    cache: dict[int, bool] = {}

    def fits_at(index: int) -> bool:
        if index not in cache:
            cache[index] = meter.fits(*piece(cuts[index]))
        return cache[index]

    def estimate() -> int:
        # Sizes fall along `cuts`: the first cut whose size is within the estimate.
        index = bisect_left(cuts, -meter.estimated_chars(), key=lambda cut: -size(cut))
        return min(index, len(cuts) - 1)

    # Each measurement corrects the density; re-aim once or twice before searching.
    guess = estimate()
    for _ in range(2):
        fits_at(guess)
        better = estimate()
        if better == guess:
            break
        guess = better
    return cuts[_first_true(len(cuts), fits_at, guess)]


def _content_end(text: str, start: int) -> int:
    """Where the line containing str index `start` ends, before its line break."""
    eol = _EOL.search(text, start)
    return eol.start() if eol else len(text)


def _tail_line_starts(text: str, floor: int) -> tuple[list[int], int]:
    """The line starts at or after `floor`, and the line number of the first: only the
    tail of a big file is scanned, line numbers still count from its top."""
    if floor <= 0:
        return [0] + [eol.end() for eol in _EOL.finditer(text)], 0
    first = _EOL.search(text, floor)
    if first is None:
        return [], 0
    # Every line break is \n, \r, or \r\n counted once; `first` ends a whole one.
    line = text.count("\n", 0, first.end()) + text.count("\r", 0, first.end())
    line -= text.count("\r\n", 0, first.end())
    return [first.end()] + [eol.end() for eol in _EOL.finditer(text, first.end())], line


def _middle_start(prefix: str, start: int, lines: int) -> int:
    """psm-line: where the middle's opening lines start: the last line after the window start
    `start` on the grid of every `lines`-th line from the top of `prefix`, else `start`."""
    starts, first_line = _tail_line_starts(prefix, start)
    grid = [cut for line, cut in enumerate(starts, first_line) if line % max(lines, 1) == 0]
    return grid[-1] if grid else start


def _anchored_start(prefix: str, anchor_line: int, meter: _Meter) -> int | None:
    """The start of line `anchor_line` when the window from it to the cursor fits `meter`
    and it is not below the cursor's line; else None."""
    floor = max(len(prefix) - meter.reach(), 0)
    starts, first_line = _tail_line_starts(prefix, floor)
    index = anchor_line - first_line
    if not starts or not 0 <= index < len(starts):
        return None
    start, cursor_line = starts[index], starts[-1]
    return start if meter.fits(prefix[start:cursor_line], prefix[cursor_line:]) else None


def _line_number(prefix: str, start: int) -> int | None:
    """The line `start` begins, counted from the top of `prefix`; None when it is inside one."""
    if start > 0 and (prefix[start - 1] not in "\r\n" or prefix[start - 1:start + 1] == "\r\n"):
        return None  # inside a line, or between the two characters of a \r\n
    line = prefix.count("\n", 0, start) + prefix.count("\r", 0, start)
    return line - prefix.count("\r\n", 0, start)


def _prefix_start(prefix: str, block_lines: int, meter: _Meter) -> int:
    """Where the prefix window starts: the earliest line of the grid of every `block_lines`-th
    line whose tail fits. Only when none does (the lines nearest the cursor are long): the
    earliest line start after the last grid line; and when that leaves only the cursor line,
    what fits of the line above."""
    if meter.budget <= 0 or not prefix:
        return len(prefix)
    floor = max(len(prefix) - meter.reach(), 0)
    starts, first_line = _tail_line_starts(prefix, floor)
    # A window from a line start is counted as the lines above the cursor line plus the
    # cursor line, encoded apart: the lines above are the same text keystroke after
    # keystroke, so the caller's encode cache answers them (a whole window is new text on
    # every keystroke: ~1 ms an encode of a 1,024-token window, 4-8 of them a prompt).
    # Qwen's pre-tokenizer starts a piece after every line break, so the count is the same
    # (checked at 3,540 cursor positions in 5 files of the standard library); another
    # tokenizer may merge across it, a token over or under the budget.
    cursor_line = starts[-1] if starts else len(prefix)
    size = lambda cut: len(prefix) - cut  # noqa: E731
    lines = lambda cut: (prefix[cut:cursor_line], prefix[cursor_line:])  # noqa: E731
    piece = lambda cut: (prefix[cut:],)  # noqa: E731
    block = max(block_lines, 1)
    grid = [start for line, start in enumerate(starts, first_line) if line % block == 0]
    cut = _most_context(grid, size, lines, meter)
    if cut is not None:
        return cut
    cut = _most_context([start for start in starts if not grid or start > grid[-1]],
                        size, lines, meter)
    if cut is not None and cut < starts[-1]:
        return cut
    # At most the cursor line fits: keep the tail of the line that does not.
    if cut is None:
        low, high = (starts[-1] if starts else floor), len(prefix)
    else:
        low = starts[-2] if len(starts) > 1 else floor
        high = _content_end(prefix, low)
    inner = _most_context(range(low + 1, high + 1), size, piece, meter)
    if inner is not None:
        return inner
    return cut if cut is not None else len(prefix)


def _suffix_end(suffix: str, budget: ContextBudget, meter: _Meter) -> int:
    """Where the suffix window ends: after the last whole line that fits; when at most the
    first line fits, what fits of the next line that does not."""
    if meter.budget <= 0 or not suffix:
        return 0
    size, piece = (lambda cut: cut), (lambda cut: (suffix[:cut],))
    reach = meter.reach()
    ends = []
    for eol in _EOL.finditer(suffix):
        if eol.end() > reach:
            break
        ends.append(eol.end())
    if len(suffix) <= reach and (not ends or ends[-1] != len(suffix)):
        ends.append(len(suffix))
    cut = _most_context(ends[::-1], size, piece, meter)
    if cut is not None and (cut == len(suffix) or cut > ends[0]):
        return cut
    # At most the first line fits: keep the head of the line that does not.
    split = cut if cut is not None else 0
    inner = _most_context(range(_content_end(suffix, split), split, -1), size, piece, meter)
    if inner is not None:
        return inner
    return cut if cut is not None else 0


def build_fim_prompt(
    prefix: str,
    suffix: str,
    encode: Encode,
    fim: FimTokens,
    budget: ContextBudget = ContextBudget(),
    mode: FimMode = "psm",
    anchor_line: int | None = None,
    anchor_tokens: int | None = None,
) -> FimPrompt:
    """The FIM prompt for a cursor between `prefix` and `suffix` (the whole document's text
    before and after it: line numbers count from the top of `prefix`). `anchor_line`,
    `anchor_tokens`: the `window_line` and `prefix_tokens` of the document's previous
    prompt (module docstring; no `anchor_tokens`: only `prefix_tokens` bounds the window).
    In psm-line the prefix window is split in two at a line start, which can cost one token
    over its budget."""
    if mode not in FIM_MODES:
        raise ValueError(f"FIM mode must be one of {', '.join(FIM_MODES)}, not {mode!r}")
    prefix_meter = _Meter(encode, budget.prefix_tokens)
    first = min(budget.first_prefix_tokens or budget.prefix_tokens, budget.prefix_tokens)
    first_meter = _Meter(encode, first, prefix_meter.chars_per_token, prefix_meter._ids)
    # An earlier start is kept where its window holds at least the short one on the coarse
    # grid (against the fine grid a backspace would start anew), fits, and costs no more new
    # tokens than the short one (a jump far down would refill the gap).
    grown = prefix_meter if anchor_tokens is None else _Meter(
        encode, min(budget.prefix_tokens, anchor_tokens + first), prefix_meter.chars_per_token,
        prefix_meter._ids)
    anchored = _anchored_start(prefix, anchor_line, grown) if anchor_line is not None else None
    if anchored is not None and anchored <= _prefix_start(prefix, budget.block_lines, first_meter):
        start = anchored
    else:
        short = first < budget.prefix_tokens  # a whole window (a grow warm) stays on the coarse grid
        start = _prefix_start(prefix, budget.first_block_lines if short else budget.block_lines, first_meter)
    # psm-line: the lines typed since the last grid line (within the window) open the middle.
    line_start = _middle_start(prefix, start, budget.middle_lines) if mode == "psm-line" else len(prefix)
    prefix_ids = prefix_meter.ids(prefix[start:line_start]) if start < line_start else []
    line_ids = prefix_meter.ids(prefix[line_start:]) if line_start < len(prefix) else []
    line_ids, heal = _heal_last_token(prefix[line_start:], line_ids, encode)
    suffix_meter = _Meter(encode, budget.suffix_tokens, prefix_meter.chars_per_token)
    end = _suffix_end(suffix, budget, suffix_meter)
    suffix_ids = suffix_meter.ids(suffix[:end]) if end > 0 else []
    if mode == "spm":
        ids = [fim.suffix, *suffix_ids, fim.prefix, *prefix_ids, fim.middle]
    else:
        ids = [fim.prefix, *prefix_ids, fim.suffix, *suffix_ids, fim.middle, *line_ids]
    return FimPrompt(
        ids=ids,
        prefix=prefix[start:],
        suffix=suffix[:end],
        prefix_tokens=len(prefix_ids) + len(line_ids),
        suffix_tokens=len(suffix_ids),
        mode=mode,
        prefix_start=start,
        suffix_end=end,
        heal=heal,
        window_line=_line_number(prefix, start) if start < len(prefix) else None,
        suffix_ids=tuple(suffix_ids),
    )


# A token rarely spans more characters than this; past it, no healing.
_MAX_HEAL_CHARS = 32


def _heal_last_token(line: str, ids: list[int], encode: Encode) -> tuple[list[int], str]:
    """Cut the last token of the middle's opening text: (ids without it, its text). The
    model then writes that text itself, split as it likes (see engine.healing). No cut when
    the text before the token does not encode to the other tokens (a merge across them)."""
    if not ids:
        return ids, ""
    if line[-1:].isspace():
        # After indentation or a space the next word's token usually takes the last space
        # (`"       "`, `" st"`): cut back to where a word typed next would start.
        probe = encode(line + "x")[:-1]
        for size in range(0, min(len(line), _MAX_HEAL_CHARS) + 1):
            if encode(line[: len(line) - size]) == probe:
                return probe, line[len(line) - size:]
    for size in range(1, min(len(line), _MAX_HEAL_CHARS) + 1):
        if encode(line[:-size]) == ids[:-1]:
            return ids[:-1], line[-size:]
    return ids, ""

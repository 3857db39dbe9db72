"""Greedy continuations the engine already knows: type-through and precomputed answers.

Every token a greedy generation keeps is the target's own argmax for its context (the
verify is exact), under the mask of the healed text it had to spell out. So when a new
prompt is an earlier prompt plus that generation's first `j` tokens, the earlier tokens
from `j` on are what a fresh greedy request would choose too, as long as each step's mask
in the new request is a subset of the old one and holds the old choice (argmax over a
subset that contains the global argmax is that argmax). With healed texts `r_old` (old)
and `r_new` (new) still to spell out at a step, that holds when `r_new` starts with
`r_old` and the token is allowed for `r_new`: the new text to spell is the old one plus
what the user typed, which is what typing a predicted character gives.

Where it does not hold (the typed character split a token differently, so the prompt ids
differ; the new request unconstrained where the old one was masked), the known part ends
there and the engine computes the rest itself. Pure: token texts come in as a function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

TextOf = Callable[[int], "str | None"]


@dataclass(frozen=True)
class Lineage:
    """One finished (or stopped) greedy generation: its prompt, healed text and output."""

    prompt: tuple[int, ...]
    heal: str
    tokens: tuple[int, ...]  # the kept tokens, the stop token excluded
    stop_token: int | None  # the end-of-text token that ended it, if one did
    background: bool = False  # a precompute, not a request the user waited for


def allowed(rest: str, text: str | None) -> bool:
    """What healing.TokenTexts.allowed admits: a token covering `rest` or a leading piece."""
    if not text:
        return False
    return text.startswith(rest) or (len(text) < len(rest) and rest.startswith(text))


def remaining(rest: str, text: str) -> str:
    return "" if text.startswith(rest) else rest[len(text):]


def known_continuation(record: Lineage, prompt: Sequence[int], heal: str,
                       text_of: TextOf) -> tuple[int, ...]:
    """The tokens a fresh greedy request (`prompt`, `heal`) would generate first, known
    from `record` without a model call; () when nothing can be shown to be known."""
    n = len(record.prompt)
    if len(prompt) < n or tuple(prompt[:n]) != record.prompt:
        return ()
    j = len(prompt) - n
    if j > len(record.tokens) or tuple(prompt[n:]) != record.tokens[:j]:
        return ()
    old, new = record.heal, heal
    for i, token in enumerate(record.tokens):
        text = text_of(token)
        if i >= j:
            if new and (not new.startswith(old) or not allowed(new, text)):
                return record.tokens[j:i]
            if not new and old:  # unmasked now, masked then: the old choice proves nothing
                return record.tokens[j:i]
            new = remaining(new, text or "") if new else ""
        old = remaining(old, text or "") if old else ""
    end = record.tokens[j:]
    # The stop token was chosen unmasked; the new request chooses unmasked there too only
    # once its own healed text is spelled out.
    if record.stop_token is not None and not new and not old:
        end += (record.stop_token,)
    return end


def best_known(records: Iterable[Lineage], prompt: Sequence[int], heal: str,
               text_of: TextOf) -> tuple[tuple[int, ...], Lineage | None]:
    """The longest known continuation over `records` (newest first wins ties)."""
    best: tuple[int, ...] = ()
    source = None
    for record in records:
        known = known_continuation(record, prompt, heal, text_of)
        if len(known) > len(best):
            best, source = known, record
    return best, source

"""Token healing: the output must start with a given text, tokenized however the model likes.

A prompt that ends inside the text the model is asked to continue ends on a token boundary
the model rarely saw there: `"        return "` encodes as `["       ", " return", " "]`, and
after a lone `" "` the model writes `" False"`, one space too many. So the prompt builder
drops the last token and asks for its text (the *heal* text) back: the first generated
tokens are held to spell it out, each one either covering the rest of it (`" False"` for
`" "`) or being a leading piece of it (`"   "` for `"    "`, followed by `" try"`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from typing import Any, Iterable, Sequence

import torch


class TokenTexts:
    """Each token id's text, indexed for "starts with" and "is a leading piece of" lookups."""

    def __init__(self, texts: Sequence[str], excluded: Iterable[int] = ()):
        skip = set(excluded)
        usable = [(text, i) for i, text in enumerate(texts) if text and i not in skip]
        usable.sort()
        self._sorted = [text for text, _ in usable]
        self._ids = [i for _, i in usable]
        self._by_text: dict[str, list[int]] = defaultdict(list)
        for text, i in usable:
            self._by_text[text].append(i)
        self._text_of = {i: text for text, i in usable}

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, vocab_size: int, excluded: Iterable[int] = ()) -> TokenTexts:
        size = min(vocab_size, len(tokenizer)) if hasattr(tokenizer, "__len__") else vocab_size
        return cls([tokenizer.decode([i]) for i in range(size)], excluded)

    def allowed(self, rest: str) -> list[int]:
        """Ids that may come next while `rest` is still to be spelled out: those whose text
        starts with `rest` (healing ends there) and those whose text is a leading piece of it."""
        # Texts starting with `rest` sort together, right from `rest` itself.
        low = bisect_left(self._sorted, rest)
        high = bisect_left(self._sorted, rest + "\U0010ffff", lo=low)
        found = self._ids[low:high]
        for end in range(1, len(rest)):
            found.extend(self._by_text.get(rest[:end], ()))
        return found

    def text(self, token: int) -> str | None:
        """A token's text (None for tokens without one, or excluded)."""
        return self._text_of.get(token)


def remaining(rest: str, token_text: str) -> str:
    """What is left to spell out after a token with `token_text` (one `allowed` gave)."""
    return "" if token_text.startswith(rest) else rest[len(token_text):]


def mask_to(logits: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
    """Logits [V] with every id outside `ids` at -inf."""
    masked = torch.full_like(logits, float("-inf"))
    index = torch.as_tensor(list(ids), dtype=torch.long, device=logits.device)
    masked[index] = logits[index]
    return masked

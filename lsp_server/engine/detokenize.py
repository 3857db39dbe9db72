"""Token ids -> text while streaming, safe across multi-byte characters split over tokens."""

from __future__ import annotations

from typing import Any, Sequence


class StreamingText:
    """Decodes the whole generated id list each time (cheap for completion lengths) and
    holds back a trailing U+FFFD, which means a character's bytes are not all here yet."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.text = ""

    def update(self, ids: Sequence[int], final: bool = False) -> str:
        """Returns the newly stable text (may be empty)."""
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False)
        if not final:
            text = text.rstrip("\ufffd")
        if not text.startswith(self.text):
            # A later token changed how earlier bytes decode; keep what was shown stable.
            text = self.text + text[len(self.text):] if len(text) >= len(self.text) else self.text
        delta, self.text = text[len(self.text):], text
        return delta

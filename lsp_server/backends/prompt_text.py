"""FIM prompts as text, for servers that tokenize themselves.

specfill's prompt builder (`lsp_server.context.prompt.build_fim_prompt`) works on token ids so the
local engine can reuse its KV cache. A remote server wants text, with the model's FIM tokens
written out (`<|fim_prefix|>`...; vLLM rejects an OpenAI `suffix`). `TextCodec` gives the
builder ids that are indices into a table of text pieces, so the same builder (windows, grid,
psm-line) yields a prompt that renders back to the exact text. Its pieces approximate the
model's tokens (a digit, up to 5 letters, a run of spaces, 1-2 symbols): the context budget
is honoured to within the difference, without loading a tokenizer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lsp_server.backends.base import PromptCodec
from lsp_server.context.prompt import FimTokens

# Every character falls in one alternative, so the pieces always join back to the input.
_PIECE = re.compile(r"\d|[^\W\d]{1,5}|\n|[ \t]{1,16}|\s|[^\w\s]{1,2}")


@dataclass(frozen=True)
class FimTexts:
    prefix: str
    suffix: str
    middle: str


QWEN_FIM_TEXT = FimTexts("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
# Qwen2.5-Coder's other control tokens: text after any of them is no longer the middle.
QWEN_STOP_TEXT = ("<|endoftext|>", "<|file_sep|>", "<|fim_prefix|>", "<|fim_suffix|>",
                  "<|fim_middle|>", "<|fim_pad|>", "<|repo_name|>", "<|im_end|>")


class TextCodec:
    """Pseudo-tokens for one prompt: ids 0-2 are the FIM markers, the rest index pieces."""

    def __init__(self, fim_text: FimTexts = QWEN_FIM_TEXT):
        self.pieces: list[str] = [fim_text.prefix, fim_text.suffix, fim_text.middle]
        self._ids: dict[str, int] = {}
        self.fim = FimTokens(prefix=0, suffix=1, middle=2)

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in _PIECE.findall(text):
            index = self._ids.get(piece)
            if index is None:
                index = self._ids[piece] = len(self.pieces)
                self.pieces.append(piece)
            ids.append(index)
        return ids

    def render(self, ids: list[int]) -> str:
        return "".join(self.pieces[i] for i in ids)

    def as_prompt_codec(self) -> PromptCodec:
        return PromptCodec(self.encode, self.fim, self.render)

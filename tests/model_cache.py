"""The real default pair must be on disk for slow and editor tests; say how to get it."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.commands.models import default_pair_status
from lsp_server.models.registry import SpecialTokens, resolve_cache_dir


def default_models_or_fail() -> Path:
    cache = resolve_cache_dir()
    missing = [s.spec.name for s in default_pair_status(cache) if not s.ready]
    if missing:
        pytest.fail(f"default models missing in {cache} ({', '.join(missing)}): run `make models`")
    return cache


def special_tokens_by_text(tokens: SpecialTokens) -> dict[str, int]:
    """The registry's FIM and stop ids by their text, as a loaded pair reports them."""
    return {
        "<|fim_prefix|>": tokens.fim_prefix,
        "<|fim_middle|>": tokens.fim_middle,
        "<|fim_suffix|>": tokens.fim_suffix,
        "<|endoftext|>": tokens.endoftext,
        "<|im_end|>": tokens.im_end,
    }

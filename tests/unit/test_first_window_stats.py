"""specfill/stats reports the first window's size the prefill rate gives a file opened now."""

from __future__ import annotations

from dataclasses import replace

from lsp_server.completion.documents import DocumentStore
from lsp_server.completion.service import CompletionService
from lsp_server.completion.stats import ServerStats
from lsp_server.config import Config


class TimedBackend:
    """All the service asks of a backend here: the seconds a warm's token cost."""

    def __init__(self, token_s: float | None) -> None:
        self.token_s = token_s

    def warm_token_s(self) -> float | None:
        return self.token_s


def service(token_s: float | None, config: Config = Config()) -> CompletionService:
    backend = TimedBackend(token_s)
    return CompletionService(DocumentStore(), lambda: backend, lambda: config, lambda update: None,
                             lambda *a, **k: None, ServerStats())


def test_the_first_window_is_what_the_timed_rate_fills_in_the_seconds_given():
    # 3 s at 10 ms a token: 300 tokens, less the 64-token suffix, down to a step of 32.
    assert service(0.010).first_window_tokens() == 224
    assert service(None).first_window_tokens() == Config().contextWindow.firstPrefixTokens


def test_the_first_window_is_never_reported_larger_than_the_whole_window():
    config = Config()
    small = replace(config, contextWindow=replace(config.contextWindow, prefixTokens=128))
    assert service(None, small).first_window_tokens() == 128

"""Warming a remote server's prompt cache: the prompt a document's next request will send,
loaded into the server it sticks to, with nothing generated (llama-server `n_predict: 0`,
OpenAI-style servers one token).

A real request must never wait behind a warm for long. A serving engine runs one prompt as
one step (llama-server decodes up to `--batch-size` tokens per step, 2048 by default, and a
cancel lands only between steps), so a warm is sent as growing prefixes of the prompt, each
at most `WARM_STEP_TOKENS` (pseudo-)tokens past the one before and cut at a line end: the
server's prefix cache keeps each step, and a real request arriving mid-warm waits for at most
the step under way. Before each step the warm gives way when a real request runs on that
server, and a real request cancels the warm (its connection closes) as it starts.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from lsp_server.backends.prompt_text import PIECE
from lsp_server.backends.wire import RemoteError, Usage
from lsp_server.engine.types import Stats

log = logging.getLogger(__name__)

# 256 tokens: ~1.4 s of prefill on 2 CPU cores (llama-bench pp512 184 tok/s), tens of ms
# on a GPU; `specfill bench remote --part warm` measures what a request waits.
WARM_STEP_TOKENS = 256
# Refusals that say the server will not take a warm (its body, its prompt, the key or TLS
# settings), not that it is down: warming goes off for it; the real requests tell the user
# what to fix.
REFUSALS = ("http_4xx", "auth", "tls", "protocol", "server")
# What a warm counts in the server's health, as a request would: the server is down.
DOWN = ("connect", "timeout", "http_5xx")


def warm_cuts(text: str, step_tokens: int = WARM_STEP_TOKENS) -> list[int]:
    """Prefix lengths of `text` to send in turn: each ends a line (the server tokenizes it
    as it will the whole prompt), at most `step_tokens` pieces past the previous cut where
    the lines allow (a longer line goes whole); the last is the whole text."""
    cuts: list[int] = []
    last_cut, newline = 0, None  # pieces up to the last cut; (end, pieces) of the last line end
    for count, match in enumerate(PIECE.finditer(text), 1):
        if count - last_cut > step_tokens and newline is not None:
            cuts.append(newline[0])
            last_cut, newline = newline[1], None
        if match.group().endswith("\n"):
            newline = (match.end(), count)
    if not cuts or cuts[-1] != len(text):
        cuts.append(len(text))
    return cuts


def steps_to_send(text: str, cached: str, step_tokens: int = WARM_STEP_TOKENS) -> list[int]:
    """The cuts of `text` still to send when the server's cache holds `cached` (what it last
    took from specfill): a step that is all cached would cost nothing to send but would cut
    the cache back to it (llama-server keeps only the common prefix of the new prompt), so
    steps start past the common prefix; none when `text` is all cached."""
    common = len(os.path.commonprefix([text, cached]))
    if common == len(text):
        return []
    return [cut for cut in warm_cuts(text, step_tokens) if cut > common]


@dataclass
class WarmOutcome:
    """What one warm did: `reason` warm (done) | cached (nothing to send) | aborted (gave
    way) | error."""

    reason: str
    steps: int = 0
    prompt_tokens: int = 0  # the whole prompt, as the server counted it on the last step
    evaluated_tokens: int = 0  # prefilled by the server over all steps
    cached_tokens: int = 0  # taken from its cache on the first step
    generated_tokens: int = 0  # llama-server samples one token from the prompt's last logits

    @property
    def stats(self) -> Stats:
        """As a local warm counts: the prompt's tokens and those computed for it."""
        return Stats(prompt_tokens=self.prompt_tokens, prefilled_tokens=self.evaluated_tokens)


class WarmState:
    """Per server: whether it takes warms (off once it refused one, said once in the log)."""

    def __init__(self) -> None:
        self.enabled = True
        self.off_reason: str | None = None
        self.task: Any = None  # the asyncio.Task of the warm under way, if any

    def turn_off(self, url: str, error: RemoteError) -> None:
        if self.enabled:
            self.enabled, self.off_reason = False, str(error)
            log.warning("specfill: %s refused a cache warm-up (%s); warming is off for that "
                        "server, completions go on", url, error)

    def cancel(self) -> None:
        """A real request comes: the warm stops now (its connection closes)."""
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def busy(self) -> bool:
        return self.task is not None and not self.task.done()


def add_step(outcome: WarmOutcome, usage: Usage) -> None:
    prompt, cached = usage.prompt_tokens or 0, usage.cached_prompt_tokens or 0
    if outcome.steps == 0:
        outcome.cached_tokens = cached
    outcome.steps += 1
    outcome.prompt_tokens = prompt
    outcome.evaluated_tokens += max(prompt - cached, 0)
    outcome.generated_tokens += usage.completion_tokens or 0

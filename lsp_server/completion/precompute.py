"""The next suggestion, ready on accept.

After a completion is shown, the user is likely to accept it (all of it, or its first
line) and then want the next one. So the completion service generates those next
completions in the background, each for the document state it assumes, at the lowest
priority (the worker's warm jobs: any real request preempts them within one decoder
layer). What they generate stays in the engine's lineage (engine/lineage.py): a request
at exactly that state finds its prompt there and is answered from it; any other state
simply does not match. So a wrong guess costs only the background work, never a wrong
suggestion, and an edit while one runs drops it (`cancel`).

This module keeps the bookkeeping: which states are assumed, and what was wasted.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Awaitable, Callable


@dataclass(frozen=True)
class Assumed:
    """A document state a precompute assumes: the text after an accept and the cursor there."""

    uri: str
    text: str
    line: int
    character: int


@dataclass
class Pending:
    state: Assumed
    inserted: str  # the accepted text that makes `state`
    before: str = ""  # the document it was guessed from, split at the cursor there
    after: str = ""

    def on_the_way(self, text: str) -> bool:
        """`text` is the guessed-from document with a start of `inserted` typed: the user
        is typing through the suggestion, and may still accept the rest."""
        typed = len(text) - len(self.before) - len(self.after)
        return (0 <= typed <= len(self.inserted) and text.startswith(self.before)
                and text.endswith(self.after)
                and text[len(self.before):len(self.before) + typed] == self.inserted[:typed])
    generated: int = 0  # tokens the models generated for it so far (known ones excluded)
    finished: bool = False
    discarded: bool = False  # the user did something else: its work is wasted


def accepts(completion: str) -> list[str]:
    """What the user may accept: all of it, and its first line where it has several."""
    first = completion.split("\n", 1)[0]
    return [completion] + ([first] if first.strip() and first != completion else [])


def reachable(state: Assumed, before: str, after: str) -> bool:
    """Typing more at the cursor (through the suggestion) can still make `state`."""
    return (len(state.text) > len(before) + len(after) and state.text.startswith(before)
            and state.text.endswith(after))


@dataclass
class Precomputes:
    """Per document: the running chain of precomputes and the states they assumed."""

    on_waste: Callable[[int], None] = lambda tokens: None  # a discarded precompute's tokens
    tasks: dict[str, asyncio.Task] = field(default_factory=dict)
    pending: dict[str, list[Pending]] = field(default_factory=dict)

    def start(self, uri: str, chain: list[Pending],
              run_one: Callable[[Pending], Awaitable[None]]) -> None:
        """Run `run_one` for each in turn (a newer warm would preempt an older one)."""
        self.cancel(uri)
        states = {item.state for item in chain}
        for old in self.pending.pop(uri, []):
            if old.state not in states:  # one that the new chain assumes again lives on in it
                self._discard(old)
        self.pending[uri] = chain

        async def run_all() -> None:
            for item in chain:
                await run_one(item)

        task = asyncio.create_task(run_all())
        self.tasks[uri] = task
        task.add_done_callback(lambda t, uri=uri: self.tasks.pop(uri, None) if self.tasks.get(uri) is t else None)

    def edited(self, uri: str, text: str) -> None:
        """An edit: typing through the suggestion keeps the chain (a client that keeps its
        ghost text asks nothing until the accept); anything else drops it."""
        chain = self.pending.get(uri, [])
        if not any(p.on_the_way(text) for p in chain):
            self.cancel(uri)

    def cancel(self, uri: str) -> None:
        """An edit or a real request: nothing runs in the background for this document."""
        task = self.tasks.pop(uri, None)
        if task is not None:
            task.cancel()

    def settle(self, uri: str, state: Assumed, before: str, after: str) -> int:
        """A real request at `state` (its text is `before` + `after`, split at the cursor):
        the assumed states it can no longer reach by typing at the cursor were wrong
        guesses. Returns how many precomputes that discards (the misses)."""
        chain = self.pending.pop(uri, [])
        missed = [p for p in chain if p.state != state and not reachable(p.state, before, after)]
        kept = [p for p in chain if p not in missed and p.state != state]
        if kept:
            self.pending[uri] = kept
        for p in missed:
            self._discard(p)
        return len(missed)

    def finished(self, item: Pending, generated: int) -> None:
        """Its generation ended (done or preempted; this can come after a discard)."""
        item.generated, item.finished = generated, True
        if item.discarded:
            self.on_waste(generated)

    def discard(self, uri: str) -> None:
        for p in self.pending.pop(uri, []):
            self._discard(p)

    def _discard(self, item: Pending) -> None:
        item.discarded = True
        if item.finished:
            self.on_waste(item.generated)

"""KV caches that remember which tokens they hold, reused by longest common token prefix.

A `KVSlot` pairs one model's transformers `DynamicCache` with the token ids it covers, so
rolling back a rejected draft and reusing a previous request's prefix are the same move:
`rewind` to the common prefix, `feed` the rest. A `SlotPool` keeps a few slots per model
so that switching between documents does not throw away the other document's prefix.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
from transformers import DynamicCache

from .lean_step import StaticKV, lean_forward, supports
from .types import Aborted, common_prefix_len  # noqa: F401 (Aborted: imported from here too)


# The abort check of the request running on this thread. Decoder layers look at it, so an
# abort lands within one layer (milliseconds) instead of after a whole forward pass (a
# long prefill can take seconds on a CPU).
_abort = threading.local()


@contextmanager
def abort_scope(should_abort: Callable[[], bool]) -> Iterator[None]:
    previous = getattr(_abort, "check", None)
    _abort.check = should_abort
    try:
        yield
    finally:
        _abort.check = previous


def _check_abort(_module: torch.nn.Module, _args: object) -> None:
    check = getattr(_abort, "check", None)
    if check is not None and check():
        raise Aborted()


def install_abort_hooks(model: torch.nn.Module) -> int:
    """Let every decoder layer of `model` stop a forward pass when the request is aborted.
    Returns how many layers got the hook (0: only between forwards)."""
    if getattr(model, "_specfill_abort_hooks", False):
        return 0
    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    for layer in layers:
        layer.register_forward_pre_hook(_check_abort)
    model._specfill_abort_hooks = True
    return len(layers)



class KVSlot:
    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.device = next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.ids: list[int] = []
        self._next: torch.Tensor | None = None  # see `_remember`

    def _remember(self, logits: torch.Tensor) -> None:
        """Keep the next-token logits [V] after the last position fed, for `sync` to return
        while the cache still ends there. Why: a warm prefills the prompt the request then
        sends unchanged, and re-feeding its last token for these logits cost every warm
        request one target step (35-56 ms of a line's ~0.3 s in `bench speculation`, AMD
        EPYC Zen 4). A row of a multi-row feed is copied, so the feed's logits can go."""
        last = logits[-1]
        self._next = last if logits.shape[0] == 1 else last.clone()

    def kept_logits(self) -> torch.Tensor | None:
        """The next-token logits [V] after all of `ids`, if the last feed ended there."""
        return self._next

    def forget_next(self) -> None:
        """Drop the kept next-token logits (the head that scored them has changed)."""
        self._next = None

    def rewind(self, keep: int) -> None:
        drop = len(self.ids) - keep
        if drop > 0:
            self.cache.crop(-drop)  # transformers 5.x: a negative count of tokens to drop
            del self.ids[keep:]
            self._next = None

    def _drop_partial_layers(self) -> None:
        """A forward stopped half way has appended to the first layers only: cut those back
        so every layer again holds exactly `self.ids` and the cache stays reusable."""
        keep = len(self.ids)
        for layer in self.cache.layers:
            extra = layer.get_seq_length() - keep
            if extra > 0:
                layer.crop(-extra)

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.ids = []
        self._next = None

    def feed(self, tokens: Sequence[int], all_logits: bool = True) -> torch.Tensor:
        """Append tokens; return logits [T, V] for each fed position (or [1, V] for the last)."""
        input_ids = torch.tensor([list(tokens)], device=self.device)  # [1, T]
        try:
            out = self.model(
                input_ids=input_ids, cache=self.cache, use_cache=True,
                logits_to_keep=0 if all_logits else 1,
            )
        except Aborted:
            self._drop_partial_layers()
            raise
        except BaseException:
            # Anything else may have left the cache in any state: start clean.
            self.reset()
            raise
        self.ids.extend(tokens)
        self._remember(out.logits[0])
        return out.logits[0]  # [T, V]

    def extend(
        self, ids: Sequence[int], chunk: int = 0,
        should_abort: Callable[[], bool] | None = None, first: int = 0,
    ) -> tuple[int, torch.Tensor | None]:
        """Make the cache hold exactly `ids`, feeding only what differs.

        Returns (tokens fed, next-token logits [V] or None when nothing was fed). Long
        feeds go in chunks so an abort is seen between chunks. With `first`, the chunks
        grow from `first` rows to `chunk`, none longer than what this call fed before it:
        an abort loses the chunk it lands in, so at most about half of what was done.
        """
        self.rewind(common_prefix_len(self.ids, ids))
        rest = list(ids[len(self.ids):])
        most = chunk if chunk > 0 else max(1, len(rest))
        logits = None
        start = 0
        while start < len(rest):
            if should_abort is not None and start > 0 and should_abort():
                raise Aborted()
            step = min(most, max(first, start)) if first > 0 else most
            logits = self.feed(rest[start:start + step], all_logits=False)[-1]
            start += step
        return len(rest), logits

    def sync(
        self, ids: Sequence[int], chunk: int = 0,
        should_abort: Callable[[], bool] | None = None,
    ) -> torch.Tensor:
        """Like `extend`, but always returns next-token logits [V]: if the cache already
        holds all of `ids`, those its last feed gave (`_remember`), else the last token is
        fed again to get them."""
        if common_prefix_len(self.ids, ids) == len(ids):
            if len(self.ids) == len(ids) and self._next is not None:
                return self._next  # the cache ends where its last feed did
            self.rewind(len(ids) - 1)
        _, logits = self.extend(ids, chunk, should_abort)
        assert logits is not None
        return logits


class LeanSlot(KVSlot):
    """A KVSlot run by `lean_step.lean_forward` on preallocated keys and values: the same
    logits without transformers' per-call glue, and a rollback that only sets a length."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.device = next(model.parameters()).device
        self.kv = StaticKV(model)
        self.ids = []
        self._next = None
        self.head: Callable[[torch.Tensor], torch.Tensor] | None = None  # None: the model's own

    def rewind(self, keep: int) -> None:
        if keep < len(self.ids):
            del self.ids[keep:]
            self.kv.length = keep
            self._next = None

    def reset(self) -> None:
        self.kv.release()
        self.ids = []
        self._next = None

    def feed(self, tokens: Sequence[int], all_logits: bool = True) -> torch.Tensor:
        input_ids = torch.tensor(list(tokens), device=self.device)  # [T]
        try:
            # The abort check between layers, as install_abort_hooks gives the standard forward.
            logits = lean_forward(self.model, self.kv, input_ids, all_logits, _abort_check, self.head)
        except Aborted:
            raise  # lean_forward only advances the cache once a pass is complete
        except BaseException:
            self.reset()
            raise
        self.ids.extend(tokens)
        self._remember(logits)
        return logits


def _abort_check() -> None:
    _check_abort(None, ())


def make_slot(model: torch.nn.Module, lean: bool) -> KVSlot:
    """A lean slot for a CPU model that qualifies (when `lean` asks for one), else the
    standard slot. The lean pass was measured on CPUs only; GPUs keep transformers' forward."""
    on_cpu = next(model.parameters()).device.type == "cpu"
    return LeanSlot(model) if lean and on_cpu and supports(model) else KVSlot(model)


# A warm may rewind a slot by this many tokens (a completion's own output and the few
# prompt tokens after the cursor); cutting more would throw away a prompt worth keeping.
PROTECTED_TOKENS = 256
# A shared prefix shorter than this (the FIM token and a line or two) is not worth a slot's
# cached prompt: another slot is taken instead.
MIN_REUSED = 32


# What a pool's slots may hold together, in positions (their allocated capacity): the
# prompts of several files stay cached (a switch back to one is answered without a
# prefill) within a stated memory. fp32 keys and values: ~57 KB a position for the 1.5B
# target, ~25 KB for the 0.5B draft, so ~470 + 200 MB at most for the default pair.
POOL_POSITIONS = 8192


def held_positions(slot: KVSlot) -> int:
    """The positions a slot's memory is allocated for."""
    return slot.kv.capacity if isinstance(slot, LeanSlot) else len(slot.ids)


class SlotPool:
    """A few KV slots for one model; a request takes the slot sharing the longest prefix.
    Together they hold at most `positions` positions: past it, the least recently used
    other slots are emptied."""

    def __init__(self, model: torch.nn.Module, size: int = 8, lean: bool = False,
                 positions: int = POOL_POSITIONS):
        self.model = model
        self.slots = [make_slot(model, lean) for _ in range(max(1, size))]
        self.positions = positions
        self._clock = 0
        self._last_used = [0] * len(self.slots)

    def acquire(self, ids: Sequence[int], protect: bool = False, keep: bool = False) -> KVSlot:
        """The slot sharing the longest prefix with `ids`, unless taking it would throw away
        more of its cached prompt than it keeps for next to nothing (`_wasteful`): then the slot that shares
        most among those it would not waste, else the least recently used other slot.
        `protect` (warms): nor cut more than `PROTECTED_TOKENS` off a slot's prompt, which
        the next real request may still want; `keep`: nor cut any (a warm of the whole
        window, while the short one it would cut still serves the requests)."""
        scores = [common_prefix_len(s.ids, ids) for s in self.slots]
        order = sorted(range(len(self.slots)), key=lambda i: (scores[i], self._last_used[i]), reverse=True)
        best = order[0]
        if self._wasteful(best, scores[best], protect, keep) and len(self.slots) > 1:
            kept = [i for i in order[1:] if not self._wasteful(i, scores[i], protect, keep)]
            best = kept[0] if kept else min(order[1:], key=lambda i: self._last_used[i])
        self._clock += 1
        self._last_used[best] = self._clock
        self._within_budget(keep=best, wanted=len(ids))
        return self.slots[best]

    def _wasteful(self, i: int, shared: int, protect: bool, keep: bool = False) -> bool:
        """Whether prefilling in slot `i` would cut more of its prompt than it reuses, and
        reuse next to nothing. Why: every FIM prompt starts with the same token, so the best
        slot always shares one; a warm of a file's whole window took the slot of the
        cursor's short window that way, and the request 5 s later refilled it (`bench lsp
        --session open`, 2026-12-07)."""
        losing = len(self.slots[i].ids) - shared
        if keep:
            return losing > 0
        return (shared < MIN_REUSED and losing > shared) or (protect and losing > PROTECTED_TOKENS)

    def _within_budget(self, keep: int, wanted: int) -> None:
        """Empty the least recently used slots but `keep` until the pool, with `keep`
        grown to `wanted` positions, fits its budget."""
        held = [held_positions(slot) for slot in self.slots]
        held[keep] = max(held[keep], wanted)
        for i in sorted(range(len(self.slots)), key=lambda i: self._last_used[i]):
            if sum(held) <= self.positions:
                return
            if i != keep and held[i]:
                self.slots[i].reset()
                held[i] = 0

    def held(self) -> int:
        """Positions the slots' memory is allocated for, together."""
        return sum(held_positions(slot) for slot in self.slots)

    def clear(self) -> None:
        for slot in self.slots:
            slot.reset()

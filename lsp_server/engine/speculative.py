"""The draft / verify loop.

Invariant: the target's KV slot holds every token of `ids` except the newest one, whose
logits nobody has computed yet. A round feeds [newest, d1..dk] to the target in ONE
forward, which scores the newest token's successor and every draft prefix (k+1 rows);
the agreeing prefix plus one target token is kept and the slot is rewound to match.
k = 0 is a plain decoding round through the same code.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from .cache import Aborted, KVSlot, LeanSlot, SlotPool, abort_scope, install_abort_hooks
from .controller import AcceptanceMemory, Controller, memory_key
from .costs import LiveCosts, RowCosts, catch_up_pays, draft_pays
from .detokenize import StreamingText
from .draft_head import DEFAULT_COMMON
from .draft_choice import Offer, pick_free, price_key, rewrites_suffix
from .drafters import AheadDrafter, Draft, ModelDrafter, PoolDrafter, PromptLookupDrafter
from .healing import TokenTexts, mask_to, remaining
from .lean_step import WIDE_ROWS, one_call_rows
from .lineage import Lineage, best_known
from .sampling import Sampling, entropy, pick, verify_greedy, verify_sampled
from .stopping import stop_index, tokens_within
from .types import CompletionRequest, DraftPolicy, EngineEvent, Finished, Stats, TextDelta

log = logging.getLogger(__name__)

# Lookup proposals are free, but a wrong one still costs a target pass that the draft
# model might have used better: only trust an n-gram match at least this long.
LOOKUP_MIN_MATCH = 3
# Tokens of a free source's proposals judged before its acceptance rate in a request counts.
LOOKUP_TRIAL_TOKENS = 8
# Most tokens a free draft (lookup, the pool) proposes: a verify of 16 rows is one library
# call a layer on the native kernels (lean_step.one_call_rows), and the measured costs cut it
# shorter where the source is often wrong (draft_choice).
FREE_DRAFT_MAX = 15
# Greedy generations remembered for type-through and precomputed answers (lineage.py).
LINEAGES = 32
# Most tokens the draft model drafts at rest after a warm (`_draft_ahead`): the request
# verifies as many as pay at the model's odds (costs.free_length), and each is a draft step
# of background work (9.5-12.7 ms on a Zen 4, 21 ms on a Zen 3 in `bench speculation`) that
# a request arriving meanwhile waits for at most one layer of.
AHEAD_TOKENS = 8


def _chunk(slot: KVSlot | None, wanted: int) -> int:
    """The rows a feed takes at a time on this slot: on the native one-call layers
    (lean_step) at most lean_step.NATIVE_MAX_ROWS, one library call a layer. From
    lean_step.WIDE_ROWS rows the products take the kernels' wide path: a 1,000-token prompt
    of the 1.5B target took 7.86 s in 16-row chunks, 7.66 in 64s, 6.31 in 128s and 5.50 in
    256s (AMD EPYC Zen 4, 2 threads, interleaved rounds, one run; 512s: lean_step). A real
    request that preempts a warm stops it within a 32-row tile of a product, and the warm
    loses the chunk it was in (hence `_first_chunk`)."""
    rows = one_call_rows(slot.model) if isinstance(slot, LeanSlot) else 0
    if rows:
        return min(wanted, rows) if wanted > 0 else rows
    return wanted


def _first_chunk(slot: KVSlot | None) -> int:
    """Where a warm's chunks start (KVSlot.extend's `first`), growing to `_chunk`'s rows: a
    warm preempted by a real request loses the chunk it was in. `bench lsp --session open`
    with 128-row warm chunks (AMD EPYC Zen 4, 5 spots asked 0.5 s after opening,
    2026-12-07): the request prefilled its whole 307-token prompt, the warm's first chunk
    lost. Not for a request's own prefill: growing from 64 rows made a 250-token prompt
    1.35 s against 1.04 s in one feed (1,000 tokens: 4.99 / 4.52 s; interleaved, one run).
    The AVX-512 wide path's least rows, so that every chunk keeps it there (on AVX2, whose wide
    path starts at 256 rows, the first chunks take the repacked kernels, as fast at those
    rows); 0 (fixed chunks) off the native layers."""
    return WIDE_ROWS if isinstance(slot, LeanSlot) and one_call_rows(slot.model) else 0


@dataclass
class EngineOptions:
    pool_size: int = 8  # KV slots per model, within cache.POOL_POSITIONS positions together
    # Decoder layers see aborts (cache.install_abort_hooks), so a prefill need not be cut
    # into chunks for latency; chunks only bound the activation memory of huge prompts.
    prefill_chunk: int = 512
    # A warm is preempted within a layer and loses only the chunk it was in; its chunks
    # grow to this from `_first_chunk`, so it loses at most about half of what it did.
    # 128, not a request's prefill_chunk: on the torch layers (no native kernels) a
    # request waited 2.4 s behind a preempted warm of 256-row chunks, 1.8 s being the whole
    # warm (tests/e2e/test_warm.py, tiny models).
    warm_chunk: int = 128
    # A precompute (request.background) prefills mostly what its lineage already cached,
    # so it can take small chunks: a real request preempting it waits for the rest of one
    # layer of this many rows. On the native kernels a layer of 16 rows costs ~1.5 one-row
    # layers; `bench lsp --session accept` (Intel Xeon, one run each) put the preempt at
    # p50 3.93 / max 5.86 ms with 16 (1.6 / 2.4 layers), 1.97 / 3.23 ms with 4 (0.7 / 1.1).
    background_chunk: int = 4
    lookup_min_match: int = LOOKUP_MIN_MATCH
    lookup_min_acceptance: float = 0.5
    # Most draft tokens per round whatever the policy says (0: no cap): set at load from the
    # measured round costs (backends/local_runtime.py).
    max_k: int = 0
    # Run CPU models through lean_step's forward (same numbers, ~10 % less time per draft
    # step, ~4 % per target step) where the model qualifies; False keeps transformers'.
    lean_steps: bool = True
    # The draft scores token ids below this and the request's own (draft_head.py); 0: all.
    draft_vocab: int = DEFAULT_COMMON
    free_draft_max: int = FREE_DRAFT_MAX
    # Token ids the pool of earlier prompts / of earlier generations holds (drafters.PoolDrafter;
    # 52 bytes a token: 27 + 7 MB, fixed).
    pool_tokens: int = 1 << 19
    pool_output_tokens: int = 1 << 17


@dataclass
class _Run:
    """Mutable state of one request, kept out of the engine so the engine stays reusable."""

    request: CompletionRequest
    ids: list[int]
    n_prompt: int
    stats: Stats
    sampling: Sampling
    gen: torch.Generator | None
    text: StreamingText
    t0: float = field(default_factory=time.perf_counter)
    stop_token: int | None = None  # the end-of-text token that ended it
    # Plain rounds decoded since the draft model was last passed over for its catch-up
    # (SpeculativeEngine._catch_up_pays): what not catching up has cost so far. A free draft
    # wrong at its first token counts too: it settled one token, as a plain round does.
    rented: int = 0
    passed_over: bool = False  # this round's draft model was not brought up to date

    @property
    def generated(self) -> list[int]:
        return self.ids[self.n_prompt:]


class SpeculativeEngine:
    def __init__(
        self, target: torch.nn.Module, draft: torch.nn.Module | None, tokenizer: Any,
        stop_ids: Sequence[int], options: EngineOptions | None = None,
    ):
        self.options = options or EngineOptions()
        self.target = target
        self.tokenizer = tokenizer
        self.stop_ids = frozenset(stop_ids)
        lean = self.options.lean_steps
        self.pool = SlotPool(target, self.options.pool_size, lean=lean)
        self.drafter = (ModelDrafter(draft, self.options.pool_size, lean, self.options.draft_vocab)
                        if draft is not None else None)
        for model in (target, draft):
            if model is not None:
                install_abort_hooks(model)
        self.lookup = PromptLookupDrafter()
        self.history = PoolDrafter(self.options.pool_tokens, self.options.pool_output_tokens)
        self.ahead = AheadDrafter()
        self.memory = AcceptanceMemory()
        self.live: LiveCosts | None = None  # once the runtime has timed this machine (costs)
        self._token_texts: TokenTexts | None = None  # see token_texts()
        self.lineages: deque[Lineage] = deque(maxlen=LINEAGES)  # newest last

    # -- public -----------------------------------------------------------------

    @property
    def costs(self) -> RowCosts | None:
        """The round costs the controller decides by: those timed at load, as the live
        rounds have since corrected them (costs.LiveCosts)."""
        return None if self.live is None else self.live.current

    @costs.setter
    def costs(self, measured: RowCosts | None) -> None:
        self.live = None if measured is None else LiveCosts(measured)

    def generate(
        self, request: CompletionRequest, should_abort: Callable[[], bool] = lambda: False,
    ) -> Iterator[EngineEvent]:
        run = self._start(request)
        try:
            rest = request.heal
            if request.max_new_tokens > 0 and run.sampling.greedy:
                rest = yield from self._replay_known(run)
            if run.stats.stop_reason:  # answered from an earlier generation: no model call
                yield self._finish(run)
                self._see(run)
                return
            slot = self.pool.acquire(run.ids, protect=request.max_new_tokens <= 0, keep=request.keep_cached)
            with abort_scope(should_abort):
                logits = self._prefill(run, slot, should_abort)
                if request.max_new_tokens <= 0:  # a warm: load the prompt, generate nothing
                    self._prefill_draft(run, should_abort)
                    self._draft_ahead(run, logits, should_abort)
                    run.stats.stop_reason = "warm"
            if run.stats.stop_reason == "warm":
                yield self._finish(run)
                self._see(run)
                return
            token, rest = self._choose(run, logits, rest)
            yield from self._accept(run, [token])
            while rest and not run.stats.stop_reason:  # spelling out the healed text
                if should_abort():
                    raise Aborted()
                with abort_scope(should_abort):
                    logits = self._plain_step(run, slot)
                token, rest = self._choose(run, logits, rest)
                yield from self._accept(run, [token])
            controller = Controller(request.policy, self.memory, self.costs)
            run.stats.draft_skipped = not self._draft_pays(run, controller)
            while not run.stats.stop_reason:
                if should_abort():
                    raise Aborted()
                with abort_scope(should_abort):  # not across the yield: others may run
                    new = self._round(run, slot, controller, should_abort)
                yield from self._accept(run, new)
        except Aborted:
            run.stats.stop_reason = "aborted"
        if run.stats.stop_reason != "aborted" and not request.background:
            self.memory.record_length(memory_key(request.policy), len(run.generated))
        self._remember(run)
        yield self._finish(run)
        self._see(run)

    def _see(self, run: _Run) -> None:
        """The pool learns the prompt and what was generated after it: once the answer is on
        its way, so the request never waits for it."""
        self.history.see_prompt(run.request.prompt_ids)
        self.history.see_output(run.request.prompt_ids, run.generated)

    def _replay_known(self, run: _Run) -> Iterator[EngineEvent]:
        """Stream the tokens an earlier greedy generation already settled for this prompt
        (lineage.py) as if just generated; returns the healed text still to spell out."""
        request = run.request
        rest = request.heal
        if not self.lineages:
            return rest
        texts = self.token_texts()
        known, source = best_known(reversed(self.lineages), request.prompt_ids, request.heal,
                                   texts.text)
        if not known:
            return rest
        run.stats.known_source = "background" if source.background else "generation"
        for token in known:
            if rest and token not in self.stop_ids:
                rest = remaining(rest, texts.text(token) or "")
        yield from self._accept(run, list(known))
        run.stats.known_tokens = len(run.generated)  # those within this request's budget
        return rest

    def _remember(self, run: _Run) -> None:
        """Keep a greedy generation's tokens for the requests that type through it."""
        request = run.request
        if (request.max_new_tokens <= 0 or not run.sampling.greedy or not run.generated
                and run.stop_token is None):
            return
        record = Lineage(tuple(request.prompt_ids), request.heal, tuple(run.generated),
                         run.stop_token, request.background)
        # A record that another one extends says nothing more: keep the longer.
        for old in list(self.lineages):
            if old.prompt == record.prompt and old.heal == record.heal and \
                    record.tokens[:len(old.tokens)] == old.tokens:
                self.lineages.remove(old)
        self.lineages.append(record)

    def token_texts(self) -> TokenTexts:
        """The vocabulary's texts for healing, indexed once (~1 s for 152k tokens)."""
        if self._token_texts is None:
            vocab = self.target.config.vocab_size
            self._token_texts = TokenTexts.from_tokenizer(self.tokenizer, vocab, self.stop_ids)
        return self._token_texts

    def clear_caches(self) -> None:
        """Forget every earlier request: KV caches and the generations kept for reuse."""
        self.lineages.clear()
        self.history.clear()
        self.ahead.clear()
        self.pool.clear()
        if self.drafter is not None:
            self.drafter.pool.clear()

    # -- steps ------------------------------------------------------------------

    def _start(self, request: CompletionRequest) -> _Run:
        if not request.prompt_ids:
            raise ValueError("empty prompt")
        sampling = Sampling(request.temperature, request.top_p)
        gen = None
        if not sampling.greedy:
            gen = torch.Generator().manual_seed(request.seed if request.seed is not None else 0)
        ids = list(request.prompt_ids)
        return _Run(request, ids, len(ids), Stats(prompt_tokens=len(ids)), sampling, gen,
                    StreamingText(self.tokenizer))

    @torch.inference_mode()
    def _prefill(self, run: _Run, slot: KVSlot, should_abort: Callable[[], bool]) -> torch.Tensor:
        """Next-token logits [V] after the prompt, feeding only what the slot lacks."""
        t = time.perf_counter()
        warm = run.request.max_new_tokens <= 0
        chunk = (self.options.background_chunk if run.request.background else
                 self.options.warm_chunk if warm else self.options.prefill_chunk)
        first = _first_chunk(slot) if warm or run.request.background else 0
        fed, logits = slot.extend(run.ids, _chunk(slot, chunk), should_abort, first)
        if logits is None:  # the slot already held the whole prompt: a warm's, say
            logits, fed = slot.kept_logits(), 0
            if logits is None:  # its last feed went further (a generation, since rewound)
                logits, fed = slot.sync(run.ids), 1
        run.stats.prefilled_tokens = fed
        run.stats.prefill_s = time.perf_counter() - t
        if self.live is not None:
            self.live.observe_prefill(fed, run.stats.prefill_s)
        # The draft catches up lazily in its first round; only bind its slot here.
        if self._model_drafter(run.request.policy) is not None:
            self.drafter.begin(run.ids, protect=run.request.max_new_tokens <= 0,
                               keep=run.request.keep_cached)
        return logits

    @torch.inference_mode()
    def _prefill_draft(self, run: _Run, should_abort: Callable[[], bool]) -> None:
        """A warm brings the draft's cache up too: it otherwise catches up in the first
        round, and a cold draft prefill of a whole prompt is seconds on a CPU."""
        drafter = self._model_drafter(run.request.policy)
        if drafter is not None:
            t = time.perf_counter()
            fed = drafter.prefill(run.ids, _chunk(drafter.slot, self.options.warm_chunk), should_abort,
                                  _first_chunk(drafter.slot))
            elapsed = time.perf_counter() - t
            run.stats.prefill_s += elapsed
            if self.live is not None:
                self.live.observe_catch_up(fed, elapsed)

    @torch.inference_mode()
    def _draft_ahead(self, run: _Run, logits: torch.Tensor, should_abort: Callable[[], bool]) -> None:
        """A warm, once both caches hold its prompt: the draft model drafts after the answer's
        first token (the target's greedy pick from `logits`), so the request's first round
        has its draft already (drafters.AheadDrafter). Up to AHEAD_TOKENS and the policy's
        k_max, fewer where this context's answers are short (AcceptanceMemory.remaining),
        stopping as a round's draft does (the confidence stop, the answer's end); a request
        arriving stops it within a layer, and the tokens drafted by then are kept. Why: the
        first round's draft steps were what a line's rounds lost against plain decoding
        (`bench speculation` on an AVX2 Zen 3: lines 1.00x without, 1.22x with)."""
        request = run.request
        drafter = self._model_drafter(request.policy)
        if drafter is None or not run.sampling.greedy or request.policy.k_max <= 0 \
                or drafter.missing(run.ids):
            return
        try:
            first, rest = self._choose(run, logits, request.heal)
        except ValueError:  # no token continues the healed text: the request will say so
            return
        ends = self._answer_end(run)
        if rest or ends(first):  # the healed text goes on, or the answer is one token
            return
        wanted = min(AHEAD_TOKENS, self.options.free_draft_max, request.policy.k_max)
        likely = self.memory.remaining(memory_key(request.policy), 1)
        if likely is not None:
            wanted = min(wanted, max(0, math.ceil(likely) - 1))
        if wanted <= 0:
            return
        context, made = run.ids + [first], []

        def told(token: int) -> bool:  # each token but the last as the draft makes it: kept if aborted
            made.append(token)
            return ends(token)

        t = time.perf_counter()
        try:
            made = drafter.propose(context, wanted, request.policy.draft_p_min, run.sampling, None,
                                   should_abort, told).tokens
        except Aborted:
            pass  # a request came: it has what was drafted so far
        elapsed = time.perf_counter() - t
        # The draft's cache goes back to the prompt: a warm that keeps every cached prompt
        # (the whole window after the short one) takes no slot holding more than its prompt,
        # and re-prefilled the whole draft elsewhere (tests/e2e/test_warm.py); the request
        # feeds the first token and the accepted ones in one catch-up feed before its model
        # drafts again.
        drafter.slot.rewind(len(run.ids))
        self.ahead.keep(context, made)
        run.stats.ahead_tokens = len(made)
        run.stats.draft_s += elapsed
        if self.live is not None and made:
            self.live.observe_draft(len(made), elapsed)

    @torch.inference_mode()
    def _plain_step(self, run: _Run, slot: KVSlot) -> torch.Tensor:
        """Feed the newest token alone; next-token logits [V]. Metered as a plain round."""
        t = time.perf_counter()
        logits = slot.feed([run.ids[-1]])[-1]
        elapsed = time.perf_counter() - t
        run.stats.verify_s += elapsed
        if self.live is not None:
            self.live.observe_feed(1, elapsed)
        run.stats.rounds += 1
        run.stats.plain_rounds += 1
        run.stats.k_trace.append(0)
        return logits

    def _choose(self, run: _Run, logits: torch.Tensor, rest: str) -> tuple[int, str]:
        """One token from next-token logits; while `rest` of the healed text is still to be
        spelled out, only from the tokens that continue it. Returns (token, what is left)."""
        if not rest:
            return pick(logits, run.sampling, run.gen), ""
        texts = self.token_texts()
        allowed = texts.allowed(rest)
        if not allowed:  # a byte-level vocabulary spells anything; other tokenizers may not
            raise ValueError(f"no token of this model's vocabulary continues {rest!r}; "
                             "set contextWindow.fimMode to psm")
        token = pick(mask_to(logits, allowed), run.sampling, run.gen)
        return token, remaining(rest, texts.text(token) or "")

    @torch.inference_mode()
    def _round(
        self, run: _Run, slot: KVSlot, controller: Controller, should_abort: Callable[[], bool],
    ) -> list[int]:
        stats, ids = run.stats, run.ids
        left = min(run.request.max_new_tokens - len(run.generated), self._worth_drafting(run))
        k = min(controller.next_k(), left)
        if self.options.max_k:
            k = min(k, self.options.max_k)
        free = min(self.options.free_draft_max, left) if controller.speculates else 0
        draft = self._draft(run, k, free, controller, should_abort)
        if should_abort():
            raise Aborted()
        t = time.perf_counter()
        logits = slot.feed([ids[-1]] + draft.tokens)  # [k+1, V]
        if self.live is not None:
            self.live.observe_feed(len(draft.tokens) + 1, time.perf_counter() - t)
        if run.sampling.greedy:
            n, nxt = verify_greedy(draft.tokens, logits)
        else:
            n, nxt = verify_sampled(draft.tokens, draft.probs, logits, run.sampling, run.gen)
        slot.rewind(len(ids) + n)
        if draft.tokens and n == 0 and run.passed_over:
            # Why: a block's lookups, right at 29 of 124 tokens, ran 43 rounds while the draft
            # model, behind by what they settled, was never priced again (`bench
            # speculation`, seed 1, AMD EPYC Zen 4); with this, the model drafted there, 27 of
            # 31 right.
            run.rented += 1
        h = float(entropy(logits[: n + 1]).mean()) if controller.entropy_switching else None
        stats.verify_s += time.perf_counter() - t
        stats.rounds += 1
        stats.k_trace.append(len(draft.tokens))
        if draft.tokens:
            stats.speculative_rounds += 1
            stats.accepted_lengths.append(n)
            d = stats.drafter(draft.source)
            d.rounds += 1
            d.drafted += len(draft.tokens)
            d.accepted += n
        else:
            stats.plain_rounds += 1
        controller.observe(len(draft.tokens), n, h, model=draft.source in (ModelDrafter.name, AheadDrafter.name),
                           source=price_key(draft.source, draft.match))
        if draft.tokens and log.isEnabledFor(logging.DEBUG):
            log.debug("%s round %d (%s): %s drafted %d (match %d), %d accepted",
                      run.request.id, stats.rounds, memory_key(run.request.policy), draft.source,
                      len(draft.tokens), draft.match, n)
        return draft.tokens[:n] + [nxt]

    def _draft(
        self, run: _Run, k: int, free: int, controller: Controller, should_abort: Callable[[], bool],
    ) -> Draft:
        """This round's draft: a free one when it is expected to pay more (draft_choice),
        else the draft model's k tokens, else none (a plain round)."""
        policy = run.request.policy
        model = None if run.stats.draft_skipped or k <= 0 else self._model_drafter(policy)
        passed_over = model is not None and not self._catch_up_pays(run, model, controller)
        run.passed_over = passed_over
        if passed_over:
            run.stats.catch_ups_skipped += 1
            model = None
        t = time.perf_counter()
        offers = self._free_offers(run, free, policy.prompt_lookup) if free > 0 else []
        draft = pick_free(offers, controller, k if model is not None else 0,
                          min_match=self.options.lookup_min_match, trusted=self._trusted(run))
        if draft is not None:
            run.stats.drafter(draft.source).time_s += time.perf_counter() - t
            run.stats.draft_s += time.perf_counter() - t
            return draft
        if model is None:
            run.rented += passed_over  # a plain round it might have bettered
            return Draft("plain", [])
        run.rented = 0
        if model.missing(run.ids) > 1:  # catching up, timed apart from the draft steps
            fed = model.prefill(run.ids, _chunk(model.slot, self.options.prefill_chunk), should_abort)
            if self.live is not None:
                self.live.observe_catch_up(fed, time.perf_counter() - t)
        steps_t = time.perf_counter()
        draft = model.propose(
            run.ids, k, policy.draft_p_min, run.sampling, run.gen, should_abort, self._answer_end(run))
        now = time.perf_counter()
        if self.live is not None:
            self.live.observe_draft(len(draft.tokens), now - steps_t)
        run.stats.drafter(draft.source).time_s += now - t
        run.stats.draft_s += now - t
        return draft

    def _likely_rest(self, run: _Run) -> float | None:
        """Tokens this answer likely still needs (AcceptanceMemory.remaining), None: no guess."""
        return self.memory.remaining(memory_key(run.request.policy), len(run.generated))

    def _catch_up_pays(self, run: _Run, model: ModelDrafter, controller: Controller) -> bool:
        """Whether the draft model, behind by the tokens free drafts and plain rounds settled
        since its last round, is worth bringing up to date (costs.catch_up_pays); `_draft_pays`
        judges only the request's first catch-up."""
        if controller.costs is None:
            return True
        missing = model.missing(run.ids)
        if model.name not in run.stats.drafters:  # not drafted yet: what it lacked at the
            missing -= run.stats.draft_catch_up  # start, draft_pays let run
        left = run.request.max_new_tokens - len(run.generated)
        rest = self._likely_rest(run)
        return catch_up_pays(controller.costs, controller.acceptance, missing,
                             None if rest is None else min(left, rest), run.rented,
                             run.request.policy.k_max)

    def _worth_drafting(self, run: _Run) -> int:
        """Draft tokens this round can use: past the answer's likely end a verified token is
        only a verify row paid for (a round's own target token comes anyway). The likely end
        is the rest of this context's recent answers that ran longer (AcceptanceMemory.
        remaining); none did: no limit. Why: a mid-line answer is ~6 tokens, and a pool
        draft of 15 priced as if all of them counted had a line's first round verify 16 rows
        for a 6-token answer (`bench speculation`, AMD EPYC Zen 4: lines 0.87x)."""
        rest = self._likely_rest(run)
        return max(0, math.ceil(rest) - 1) if rest is not None else 1 << 30

    def _draft_pays(self, run: _Run, controller: Controller) -> bool:
        """Whether this request drafts with the model at all (costs.draft_pays): its draft
        cache may lack most of the prompt (a cold request), and prefilling that can cost
        more than rounds save on the answer's likely length (the context's recent median,
        within the budget). Without measured costs (a fixed k, tests), always."""
        drafter = self._model_drafter(run.request.policy)
        if drafter is None or controller.costs is None:
            return True
        left = run.request.max_new_tokens - len(run.generated)
        typical = self.memory.typical_length(memory_key(run.request.policy))
        tokens = left if typical is None else max(1.0, min(left, typical - len(run.generated)))
        run.stats.draft_catch_up = drafter.missing(run.ids)
        return draft_pays(controller.costs, controller.acceptance, run.stats.draft_catch_up, tokens,
                          run.request.policy.k_max)

    def _free_offers(self, run: _Run, limit: int, lookup: bool = True) -> list[Offer]:
        """What the request's own context (lookup) and earlier requests (the pool) propose
        (`lookup`: the policy lets them), and the draft model's tokens made at rest."""
        found = [(self.ahead.propose(run.ids, limit), 0)]
        if lookup:
            found += [self.lookup.propose(run.ids, limit), self.history.propose(run.ids, limit)]
        return [Offer(self._within_answer(run, draft), n) for draft, n in found
                if not rewrites_suffix(draft.tokens, run.request.suffix_ids)]

    def _answer_end(self, run: _Run) -> Callable[[int], bool]:
        """Told a draft's tokens in turn, whether the answer would end with this one (an
        end-of-text token, or the stop rule cutting the text): the draft model stops there,
        as free drafts are cut (`_within_answer`). Why: a line's last round drafted on past
        its newline, k draft steps and verify rows for tokens never shown."""
        texts, rule, stops = self.token_texts(), run.request.policy.stop, self.stop_ids
        text = [_shown(run)]

        def ends(token: int) -> bool:
            if token in stops:
                return True
            text[0] += texts.text(token) or ""
            return stop_index(text[0], rule) is not None
        return ends

    def _within_answer(self, run: _Run, draft: Draft) -> Draft:
        """The draft up to where the answer would end were it right: an end-of-text token,
        or the token whose text makes the stop rule cut (stopping.tokens_within)."""
        tokens = draft.tokens
        ends = next((i + 1 for i, token in enumerate(tokens) if token in self.stop_ids), len(tokens))
        texts = self.token_texts()
        keep = tokens_within(_shown(run), [texts.text(t) for t in tokens[:ends]], run.request.policy.stop)
        return draft if keep == len(tokens) else Draft(draft.source, tokens[:keep], match=draft.match)

    def _trusted(self, run: _Run) -> set[str]:
        """Free sources that may go before the draft model when no costs are measured: a
        free guess is free to make, but a wrong one wastes the target pass the model could
        have used, so once a source has a record in this request it must be right at least
        `lookup_min_acceptance` of the time."""
        trusted = set()
        for source in (self.lookup.name, self.history.name):
            d = run.stats.drafters.get(source)
            if d is None or d.drafted < LOOKUP_TRIAL_TOKENS or \
                    d.acceptance_rate >= self.options.lookup_min_acceptance:
                trusted.add(source)
        return trusted

    def _model_drafter(self, policy: DraftPolicy) -> ModelDrafter | None:
        """The draft model when this request may use it."""
        if self.drafter is None or policy.mode == "off" or not policy.model_draft:
            return None
        return self.drafter

    def _accept(self, run: _Run, new_tokens: list[int]) -> Iterator[EngineEvent]:
        """Append accepted tokens, apply stop ids / budget / stop rule, stream the text."""
        stats = run.stats
        for i, tok in enumerate(new_tokens):
            if tok in self.stop_ids:
                new_tokens, stats.stop_reason = new_tokens[:i], "eos"
                run.stop_token = tok
                break
        budget = run.request.max_new_tokens - len(run.generated)
        if len(new_tokens) >= budget:
            new_tokens = new_tokens[:budget]
            stats.stop_reason = stats.stop_reason or "max-tokens"
        run.ids.extend(new_tokens)
        now = time.perf_counter() - run.t0
        stats.token_times_s.extend([now] * len(new_tokens))
        if stats.ttft_s is None and new_tokens:
            stats.ttft_s = now
        before = _shown(run)
        run.text.update(run.generated, final=bool(stats.stop_reason))
        shown = _shown(run)
        cut = stop_index(shown, run.request.policy.stop)
        if cut is not None:
            shown = shown[:cut]
            run.text.text = run.request.heal + shown
            stats.stop_reason = "stop-rule"
        if shown != before and shown.startswith(before):
            yield TextDelta(run.request.id, shown[len(before):], shown)

    def _finish(self, run: _Run) -> Finished:
        stats = run.stats
        stats.generated_tokens = len(run.generated)
        stats.total_s = time.perf_counter() - run.t0
        reason = stats.stop_reason or "aborted"
        return Finished(run.request.id, _shown(run), tuple(run.generated), stats, reason)


def _shown(run: _Run) -> str:
    """The output text after the healed text (nothing until that is spelled out)."""
    heal, text = run.request.heal, run.text.text
    return text[len(heal):] if text.startswith(heal) else ""

"""Plain data that crosses the engine's boundary. Torch-free on purpose: `syntax/` and the
server build these without loading torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence, Union

from .stopping import StopKind, StopRule  # noqa: F401  (the rule's home; requests carry it)


class Aborted(Exception):
    """Raised inside the engine when the request's abort flag is seen."""


@dataclass(frozen=True)
class DraftPolicy:
    """How to speculate for one request. `syntax.policy` fills it from the cursor context."""

    context: str = "unknown"
    k_init: int = 4
    k_min: int = 1
    k_max: int = 8
    max_new_tokens: int = 64
    stop: StopRule = field(default_factory=StopRule)
    # Stop drafting inside a round when the draft's top-1 probability drops below this.
    draft_p_min: float = 0.5
    # Target entropy (nats, moving average) above `entropy_high` switches to plain
    # decoding, below `entropy_low` switches back: hysteresis so it does not flap.
    entropy_high: float = 2.5
    entropy_low: float = 1.2
    # "adaptive": controller tunes k; "fixed": always k_init; "off": plain decoding.
    mode: Literal["adaptive", "fixed", "off"] = "adaptive"
    # Try n-gram prompt lookup before the draft model when it has a match.
    prompt_lookup: bool = True
    # Use the draft model. False leaves prompt lookup alone: a round without a lookup
    # match decodes plainly (what `specfill bench policy` measures as "lookup").
    model_draft: bool = True


@dataclass(frozen=True)
class CompletionRequest:
    id: str
    prompt_ids: tuple[int, ...]
    policy: DraftPolicy = field(default_factory=DraftPolicy)
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    # Text the output must start with, tokenized as the model likes (engine.healing): the
    # prompt builder cut it from the prompt's end. It is not part of the streamed text.
    heal: str = ""
    # A precompute nobody waits for yet (the next suggestion after an accept): metered
    # apart, and the answers it settles are counted as precomputed hits.
    background: bool = False
    # A warm that cuts no cached prompt: the whole window filled in behind a cursor's short
    # one, which the requests take until it is done (cache.SlotPool.acquire).
    keep_cached: bool = False
    # The text after the cursor as the prompt holds it: a free draft that would write it
    # again is dropped (draft_choice.rewrites_suffix).
    suffix_ids: tuple[int, ...] = ()

    @property
    def max_new_tokens(self) -> int:
        return self.policy.max_new_tokens


@dataclass
class DrafterStats:
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    time_s: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass
class Stats:
    """Honest metering of one request: every drafted token is counted, accepted or not."""

    prompt_tokens: int = 0
    prefilled_tokens: int = 0
    generated_tokens: int = 0
    rounds: int = 0
    plain_rounds: int = 0
    speculative_rounds: int = 0
    drafters: dict[str, DrafterStats] = field(default_factory=dict)
    accepted_lengths: list[int] = field(default_factory=list)
    k_trace: list[int] = field(default_factory=list)
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0
    ttft_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    stop_reason: str = ""
    # Leading tokens taken from an earlier greedy generation (engine.lineage) instead of
    # the models, and where from: "generation" (type-through) or "background" (precompute).
    known_tokens: int = 0
    known_source: str = ""
    # Prompt tokens the draft model's cache lacked when the rounds began, and whether that
    # catch-up was judged to cost more than drafting saves (then only lookup drafts).
    draft_catch_up: int = 0
    draft_skipped: bool = False
    # Rounds that passed the draft model over because the tokens it lacked by then (settled by
    # free drafts and plain rounds) cost more to catch up than it would save on the rest.
    catch_ups_skipped: int = 0
    # A warm: tokens the draft model drafted at rest after the answer's first token, for the
    # request's first round (SpeculativeEngine._draft_ahead; their time is in draft_s).
    ahead_tokens: int = 0

    @property
    def drafted(self) -> int:
        return sum(d.drafted for d in self.drafters.values())

    @property
    def accepted(self) -> int:
        return sum(d.accepted for d in self.drafters.values())

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_per_round(self) -> float:
        spec = self.speculative_rounds
        return self.accepted / spec if spec else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.total_s if self.total_s > 0 else 0.0

    def drafter(self, name: str) -> DrafterStats:
        return self.drafters.setdefault(name, DrafterStats())

    def deliveries(self) -> list[tuple[float, int]]:
        """(time, tokens) of each delivery: a round's accepted tokens arrive together, so
        they share one time stamp."""
        out: list[tuple[float, int]] = []
        for t in self.token_times_s:
            if out and out[-1][0] == t:
                out[-1] = (t, out[-1][1] + 1)
            else:
                out.append((t, 1))
        return out

    def inter_token_latencies(self) -> list[float]:
        """Per token after the first delivery: the time since the previous delivery shared
        by the tokens that arrived together (a round of 4 tokens after 80 ms: 4 x 20 ms).
        A burst's tokens do not arrive 0 s apart in any sense a user feels; this is the
        pace the text grows at."""
        d = self.deliveries()
        return [(t - t0) / n for (t0, _), (t, n) in zip(d, d[1:]) for _ in range(n)]

    def delivery_gaps(self) -> list[float]:
        """Seconds between successive deliveries: how often the shown text changes."""
        d = self.deliveries()
        return [t - t0 for (t0, _), (t, _) in zip(d, d[1:])]

    def to_dict(self) -> dict:
        itl = sorted(self.inter_token_latencies())
        return {
            "prompt_tokens": self.prompt_tokens,
            "prefilled_tokens": self.prefilled_tokens,
            "generated_tokens": self.generated_tokens,
            "rounds": self.rounds,
            "plain_rounds": self.plain_rounds,
            "speculative_rounds": self.speculative_rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_per_round": self.mean_accepted_per_round,
            "drafters": {
                name: {**vars(d), "acceptance_rate": d.acceptance_rate}
                for name, d in self.drafters.items()
            },
            "k_trace": list(self.k_trace),
            "prefill_s": self.prefill_s,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "total_s": self.total_s,
            "ttft_s": self.ttft_s,
            "itl_p50_s": percentile(itl, 50),
            "itl_p95_s": percentile(itl, 95),
            "delivery_gap_p50_s": percentile(sorted(self.delivery_gaps()), 50),
            "tokens_per_s": self.tokens_per_s,
            "stop_reason": self.stop_reason,
            "known_tokens": self.known_tokens,
            "known_source": self.known_source,
            "draft_catch_up": self.draft_catch_up,
            "draft_skipped": self.draft_skipped,
            "catch_ups_skipped": self.catch_ups_skipped,
        }


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share (what a KV cache can reuse)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted list; None when empty."""
    if not sorted_values:
        return None
    rank = max(0, min(len(sorted_values) - 1, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[rank]


@dataclass(frozen=True)
class TextDelta:
    """Accepted text so far grew. `text` is the full text so far (ghost text wants the newest)."""

    request_id: str
    delta: str
    text: str


@dataclass(frozen=True)
class Finished:
    request_id: str
    text: str
    token_ids: tuple[int, ...]
    stats: Stats
    reason: str  # "stop-rule" | "eos" | "max-tokens" | "aborted" | "error"
    error: str | None = None


EngineEvent = Union[TextDelta, Finished]

"""Totals since start, per syntax context, and the last completion: `specfill/stats`."""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import psutil

from lsp_server.engine.types import Stats, percentile


@dataclass
class _Tally:
    requests: int = 0
    completions: int = 0
    cancelled: int = 0
    empty: int = 0
    errors: int = 0
    generated_tokens: int = 0
    rounds: int = 0
    plain_rounds: int = 0
    speculative_rounds: int = 0
    prefilled_tokens: int = 0
    prompt_tokens: int = 0
    decode_s: float = 0.0
    k_sum: int = 0
    draft_skipped: int = 0  # requests whose draft catch-up would have cost more than it saved
    catch_ups_skipped: int = 0  # rounds that passed the draft over for a catch-up mid-answer
    drafters: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: {"drafted": 0, "accepted": 0, "rounds": 0, "time_s": 0.0}))
    # The newest samples only: a server that runs for weeks must not grow with every token.
    ttft_s: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    itl_s: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))

    def add(self, stats: Stats) -> None:
        self.generated_tokens += stats.generated_tokens
        self.rounds += stats.rounds
        self.plain_rounds += stats.plain_rounds
        self.speculative_rounds += stats.speculative_rounds
        self.prefilled_tokens += stats.prefilled_tokens
        self.prompt_tokens += stats.prompt_tokens
        self.decode_s += stats.total_s
        self.k_sum += sum(stats.k_trace)
        self.draft_skipped += stats.draft_skipped
        self.catch_ups_skipped += stats.catch_ups_skipped
        for name, d in stats.drafters.items():
            row = self.drafters[name]
            row["drafted"] += d.drafted
            row["accepted"] += d.accepted
            row["rounds"] += d.rounds
            row["time_s"] += d.time_s  # proposing: draft steps, or a free source's lookup
        if stats.ttft_s is not None:
            self.ttft_s.append(stats.ttft_s)
        self.itl_s.extend(stats.inter_token_latencies())

    def to_json(self) -> dict[str, Any]:
        drafted = sum(d["drafted"] for d in self.drafters.values())
        accepted = sum(d["accepted"] for d in self.drafters.values())
        ttft, itl = sorted(self.ttft_s), sorted(self.itl_s)
        return {
            "requests": self.requests, "completions": self.completions,
            "cancelled": self.cancelled, "empty": self.empty, "errors": self.errors,
            "generated_tokens": self.generated_tokens, "rounds": self.rounds,
            "plain_rounds": self.plain_rounds, "speculative_rounds": self.speculative_rounds,
            "prompt_tokens": self.prompt_tokens, "prefilled_tokens": self.prefilled_tokens,
            "drafted": drafted, "accepted": accepted,
            "acceptance_rate": accepted / drafted if drafted else 0.0,
            "mean_accepted_per_round": (
                accepted / self.speculative_rounds if self.speculative_rounds else 0.0),
            "mean_k": self.k_sum / self.speculative_rounds if self.speculative_rounds else 0.0,
            "draft_skipped": self.draft_skipped,
            "catch_ups_skipped": self.catch_ups_skipped,
            "drafters": {
                name: {**row, "acceptance_rate": row["accepted"] / row["drafted"] if row["drafted"] else 0.0}
                for name, row in self.drafters.items()},
            "tokens_per_s": self.generated_tokens / self.decode_s if self.decode_s else 0.0,
            "ttft_p50_s": percentile(ttft, 50), "ttft_p95_s": percentile(ttft, 95),
            "itl_p50_s": percentile(itl, 50), "itl_p95_s": percentile(itl, 95),
        }


class ServerStats:
    def __init__(self) -> None:
        self.totals = _Tally()
        self.by_context: dict[str, _Tally] = defaultdict(_Tally)
        self.last: dict[str, Any] | None = None
        # Background prefills (completion/background.py): outcome counts and tokens they loaded.
        self.warms: dict[str, Any] = {"warm": 0, "aborted": 0, "error": 0, "prefilled_tokens": 0,
                                      "ahead_tokens": 0, "ahead_draft_s": 0.0, "last": None}
        # Answers taken from earlier generations (engine/lineage.py, completion/precompute.py).
        self.reuse: dict[str, int] = {
            "answers_from_generation": 0,  # type-through: the start came from the last one
            "answers_known_in_full": 0,  # ... all of it: no model call at all
            "remote_type_through": 0,  # typed through a remote stream (running or ended): not asked again
            "precomputed_hits": 0,  # answers that came from a background precompute
            "precomputed_misses": 0,  # precomputes whose assumed state never came
            "precomputes": 0,  # background generations run (or started)
            "background_tokens": 0,  # tokens the models generated for them
            "background_tokens_wasted": 0,  # ... for the misses
        }

    def reused(self, stats: Stats) -> None:
        """A real request's answer: did it come (partly) from an earlier generation?"""
        if not stats.known_tokens:
            return
        key = "precomputed_hits" if stats.known_source == "background" else "answers_from_generation"
        self.reuse[key] += 1
        if stats.rounds == 0 and stats.prefilled_tokens == 0:
            self.reuse["answers_known_in_full"] += 1

    def background(self, stats: Stats) -> int:
        """A precompute finished (or was preempted); returns the tokens the models made."""
        made = max(0, stats.generated_tokens - stats.known_tokens)
        self.reuse["precomputes"] += 1
        self.reuse["background_tokens"] += made
        return made

    def joined(self) -> None:
        """A request typed through a remote stream, running or ended (completion/streams.py)."""
        self.reuse["remote_type_through"] += 1

    def missed(self, count: int) -> None:
        self.reuse["precomputed_misses"] += count

    def wasted(self, tokens: int) -> None:
        self.reuse["background_tokens_wasted"] += tokens

    def warm(self, reason: str, stats: Stats) -> None:
        """reason: warm (done) | aborted (preempted by a request) | error; a remote warm
        with nothing to send (cached) counts as done"""
        key = reason if reason in ("warm", "aborted") else "warm" if reason == "cached" else "error"
        self.warms[key] += 1
        self.warms["prefilled_tokens"] += stats.prefilled_tokens
        # the draft model's tokens made at rest for the request's first round (engine)
        self.warms["ahead_tokens"] += stats.ahead_tokens
        self.warms["ahead_draft_s"] += stats.draft_s
        self.warms["last"] = {"reason": reason, "prompt_tokens": stats.prompt_tokens,
                              "prefilled_tokens": stats.prefilled_tokens, "prefill_s": stats.prefill_s}

    def request(self, context: str) -> None:
        self.totals.requests += 1
        self.by_context[context].requests += 1

    def work(self, context: str, stats: Stats) -> None:
        """What the engine did for one request, whatever its outcome (cancelled ones too)."""
        for tally in (self.totals, self.by_context[context]):
            tally.add(stats)

    def outcome(self, context: str, kind: str, stats: Stats | None = None,
                request_id: Any = None) -> None:
        """kind: completion | empty | cancelled | error. `stats` only becomes `last`; the
        engine work is counted by `work`."""
        for tally in (self.totals, self.by_context[context]):
            if kind == "completion":
                tally.completions += 1
            elif kind == "empty":
                tally.empty += 1
            elif kind == "cancelled":
                tally.cancelled += 1
            else:
                tally.errors += 1
        if stats is not None and kind in ("completion", "empty"):
            self.last = {"context": context, "request_id": request_id, **stats.to_dict()}

    def to_json(self, engine_memory: dict | None = None) -> dict[str, Any]:
        return {
            "totals": self.totals.to_json(),
            "by_context": {c: t.to_json() for c, t in sorted(self.by_context.items())},
            "last": self.last,
            "warms": self.warms,
            "reuse": self.reuse,
            "acceptance_memory": engine_memory or {},
            "rss_bytes": psutil.Process().memory_info().rss,
        }
